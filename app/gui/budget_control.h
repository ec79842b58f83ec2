// The budget in the toolbar: a unit (entries per head, MiB, % of the current context), a slider
// (logarithmic over 1 .. the model's context length, in entries) and a spin box in the unit,
// plus a hint with the budget in the other units. The budget itself is always a whole number of
// entries per head; the unit only changes how it reads (budget_units.h converts). Emits
// budgetEdited when the user changes it (not when set from code).
#pragma once
#include <QWidget>
#include <cstdint>

#include "budget_units.h"

class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QSlider;

class BudgetControl : public QWidget {
  Q_OBJECT

 public:
  static constexpr int kSliderSteps = 1000;

  explicit BudgetControl(QWidget* parent = nullptr);

  int64_t entriesPerHead() const { return m_entries; }
  void setEntriesPerHead(int64_t entries);  // no budgetEdited
  // Where the conversions come from; maxEntries bounds the slider (the model's context).
  void setScale(const BudgetScale& scale, int64_t maxEntries);
  const BudgetScale& scale() const { return m_scale; }
  BudgetUnit unit() const;
  void setUnit(BudgetUnit unit);
  // Replaces the hint (e.g. "full cache: no budget") while the budget does not apply.
  void setInactiveText(const QString& text);  // empty: the budget applies again

  QComboBox* unitCombo() const { return m_unit; }
  QSlider* slider() const { return m_slider; }
  QDoubleSpinBox* spinBox() const { return m_spin; }
  QString hintText() const;

 Q_SIGNALS:
  void budgetEdited(int64_t entriesPerHead);

 private:
  void showEntries();  // slider, spin box and hint from m_entries
  void onSpinEdited(double value);
  void onSliderMoved(int position);
  int sliderPosition(int64_t entries) const;
  int64_t entriesAt(int position) const;

  QComboBox* m_unit = nullptr;
  QSlider* m_slider = nullptr;
  QDoubleSpinBox* m_spin = nullptr;
  QLabel* m_hint = nullptr;
  BudgetScale m_scale;
  int64_t m_maxEntries = 1 << 15;
  int64_t m_entries = 32;
  QString m_inactive;
};
