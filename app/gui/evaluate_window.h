// Evaluate: a mini evaluation in the app. A small deterministic test set of the synthetic world
// (vision/world.h, test split, fixed seed) is answered under the full cache and under each checked
// policy at each chosen budget, by `trimkv eval`'s own loop (app/cli/eval_runner.h) on the
// AnalysisWorker. Accuracy against budget is plotted (one line per policy evaluated, the full
// cache as a dashed reference line) and tabled; results accumulate across runs (a cell run again
// replaces its row), so several policies can be drawn together. Exports: the plot as PNG/SVG
// (figure_export.h) and the table as CSV:
//   policy,budget_per_head,budget_global,accuracy,correct,n,failures,mean_kv_entries,max_kv_entries,seconds
#pragma once
#include <QByteArray>
#include <QList>
#include <QWidget>
#include <vector>

#include "analysis_worker.h"

class QChart;
class QChartView;
class QListWidget;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QSpinBox;
class QTableWidget;
class QValueAxis;

class EvaluateWindow : public QWidget {
  Q_OBJECT

 public:
  explicit EvaluateWindow(QWidget* parent = nullptr);

  // The budgeted policies are offered, each with a check box; `current` is checked when it is one
  // of them and nothing is checked yet.
  void setPolicies(const std::vector<trimkv::PolicyDescription>& policies, const QString& current);
  QStringList checkedPolicies() const;
  void setCheckedPolicies(const QStringList& names);
  // Budgets per head from the text field ("4, 8, 16"): ascending, unique, positive; empty when
  // the text is not such a list.
  QList<qint64> budgets() const;
  // The request as the controls say (modelDir and params are the main window's to fill).
  EvalRequest request() const;

  void start();   // runRequested(request()) unless running, no policy is checked or the budgets are bad
  void cancel();  // cancelRequested; the run ends with onFinished
  void clearResults();
  bool isRunning() const { return m_running; }

  void onProgress(int done, int total, const QString& what);
  void onCell(const EvalCell& cell);
  void onFinished(bool cancelled);

  const std::vector<EvalCell>& cells() const { return m_cells; }
  QByteArray csv() const;
  // Exports; a failure is reported through errorOccurred and false returned.
  bool exportPlot(const QString& path);  // .png or .svg
  bool exportCsv(const QString& path);

  QSpinBox* conversationsSpin() const { return m_conversations; }
  QSpinBox* seedSpin() const { return m_seed; }
  QListWidget* policyList() const { return m_policy; }
  QLineEdit* budgetsEdit() const { return m_budgets; }
  QPushButton* runButton() const { return m_run; }
  QPushButton* cancelButton() const { return m_cancel; }
  QProgressBar* progressBar() const { return m_progress; }
  QTableWidget* table() const { return m_table; }
  QChartView* chartView() const { return m_chartView; }
  QChart* chart() const;

 Q_SIGNALS:
  void runRequested(const EvalRequest& request);
  void cancelRequested();
  void finished(bool cancelled);
  void errorOccurred(const QString& title, const QString& message);

 private:
  void rebuildTable();
  void rebuildChart();
  void updateControls();
  void chooseExport(bool plot);

  QSpinBox* m_conversations = nullptr;
  QSpinBox* m_seed = nullptr;
  QListWidget* m_policy = nullptr;  // checkable, one item per budgeted policy
  QLineEdit* m_budgets = nullptr;
  QPushButton* m_run = nullptr;
  QPushButton* m_cancel = nullptr;
  QPushButton* m_clear = nullptr;
  QPushButton* m_exportPlot = nullptr;
  QPushButton* m_exportCsv = nullptr;
  QProgressBar* m_progress = nullptr;
  QLabel* m_status = nullptr;
  QTableWidget* m_table = nullptr;
  QChartView* m_chartView = nullptr;
  std::vector<EvalCell> m_cells;  // sorted: full first, then by policy and budget
  bool m_running = false;
};
