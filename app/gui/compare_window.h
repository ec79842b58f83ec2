// Compare: the chat's conversation answered anew under two eviction settings (A and B), side by
// side: each side's answers per turn (an answer that differs from the other side's is marked), its
// layers × KV heads grid, the selected head's strip and the image overlay (the inspector's own
// widgets). Selecting a head on either side selects it on both. The work runs on the
// AnalysisWorker (its own engine and thread); this window only asks (runRequested, cancelRequested)
// and draws what comes back (onProgress, onAnswer, onFrame, onFinished).
//
// Both sides compress exactly at their budget (slack 0): after every step above it the cache
// goes back down to M entries per head (per-head policies), so the grids compare equal memory.
#pragma once
#include <QStringList>
#include <QWidget>
#include <vector>

#include "session_types.h"

class HeadGrid;
class PolicyOptionsForm;
class QToolButton;
class HeadStrip;
class ImageOverlay;
class QComboBox;
class QLabel;
class QProgressBar;
class QPushButton;
class QSpinBox;
class QTextBrowser;

class CompareWindow : public QWidget {
  Q_OBJECT

 public:
  explicit CompareWindow(QWidget* parent = nullptr);

  // The policies the combo boxes offer (the eviction engine's).
  void setPolicies(const std::vector<trimkv::PolicyDescription>& policies);
  // Side 0 = A, 1 = B. The policy, its options and the budget per head (when it takes one) of
  // `settings`.
  void setSide(int side, const trimkv::EvictionSettings& settings);
  // What side runs under: policy, the options shown in its Options form, budget per head (if the
  // policy takes one), slack 0.
  trimkv::EvictionSettings side(int side) const;

  // Run: clears both sides and emits runRequested (nothing when a run is in flight).
  void start();
  void cancel();  // cancelRequested; the run ends with onFinished
  bool isRunning() const { return m_running; }

  // Results (GUI thread).
  void onProgress(int done, int total, const QString& what);
  void onAnswer(int side, int turn, const QString& question, const QString& answer);
  void onFrame(int side, const InspectorFrame& frame);
  void onFinished(bool cancelled);

  // For tests.
  HeadGrid* grid(int side) const { return m_panes[side].grid; }
  HeadStrip* strip(int side) const { return m_panes[side].strip; }
  ImageOverlay* overlay(int side) const { return m_panes[side].overlay; }
  QTextBrowser* answerView(int side) const { return m_panes[side].answers; }
  const QStringList& answers(int side) const { return m_panes[side].answerTexts; }
  const InspectorFrame& frame(int side) const { return m_panes[side].frame; }
  QComboBox* policyCombo(int side) const { return m_panes[side].policy; }
  QSpinBox* budgetSpin(int side) const { return m_panes[side].budget; }
  PolicyOptionsForm* optionsForm(int side) const { return m_panes[side].options; }
  QPushButton* runButton() const { return m_run; }
  QPushButton* cancelButton() const { return m_cancel; }
  QProgressBar* progressBar() const { return m_progress; }
  QString statusText() const;

 Q_SIGNALS:
  void runRequested(const trimkv::EvictionSettings& a, const trimkv::EvictionSettings& b);
  void cancelRequested();
  void finished(bool cancelled);

 private:
  struct Pane {
    QComboBox* policy = nullptr;
    QSpinBox* budget = nullptr;
    QLabel* title = nullptr;
    QTextBrowser* answers = nullptr;
    HeadGrid* grid = nullptr;
    HeadStrip* strip = nullptr;
    ImageOverlay* overlay = nullptr;
    QLabel* headLabel = nullptr;
    QStringList questions, answerTexts;
    PolicyOptionsForm* options = nullptr;  // the chosen policy's options (the chat's own form)
    QToolButton* optionsButton = nullptr;
    InspectorFrame frame;
  };
  QWidget* buildPane(int side);
  void selectHead(int layer, int head);
  void showAnswers();  // both sides, differences marked
  void updateControls();
  void updateTitle(int side);
  void syncOptionsForm(int side);  // the form shows the combo's policy

  Pane m_panes[2];
  std::vector<trimkv::PolicyDescription> m_policies;
  QPushButton* m_run = nullptr;
  QPushButton* m_cancel = nullptr;
  QProgressBar* m_progress = nullptr;
  QLabel* m_status = nullptr;
  bool m_running = false;
};
