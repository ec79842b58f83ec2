// The sampling settings of the next answers (a form in the toolbar's "Generation" menu): maximum
// new tokens, temperature (0 = greedy), top-p, top-k, repetition penalty and seed. Emits
// paramsChanged with the whole set on every edit; the window forwards it to the worker, so a
// change applies from the next answer.
#pragma once
#include <QWidget>

#include "session_types.h"  // the metatype of trimkv::GenerationParams

class QDoubleSpinBox;
class QSpinBox;

class GenerationSettings : public QWidget {
  Q_OBJECT

 public:
  explicit GenerationSettings(QWidget* parent = nullptr);

  trimkv::GenerationParams params() const;
  void setParams(const trimkv::GenerationParams& params);  // no paramsChanged

 Q_SIGNALS:
  void paramsChanged(const trimkv::GenerationParams& params);

 private:
  QSpinBox* m_maxTokens = nullptr;
  QDoubleSpinBox* m_temperature = nullptr;
  QDoubleSpinBox* m_topP = nullptr;
  QSpinBox* m_topK = nullptr;
  QDoubleSpinBox* m_repetition = nullptr;
  QSpinBox* m_seed = nullptr;
  trimkv::GenerationParams m_base;  // fields the form does not show (stop strings, EOS)
};
