#include "evaluate_window.h"

#include <QListWidget>
#include <QFileDialog>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSpinBox>
#include <QSplitter>
#include <QTableWidget>
#include <QVBoxLayout>
#include <QtCharts/QChart>
#include <QtCharts/QChartView>
#include <algorithm>
#include <cmath>

#include "atomic_file.h"
#include "budget_chart.h"
#include "figure_export.h"

namespace {

bool cellLess(const EvalCell& a, const EvalCell& b) {
  const bool fa = a.policy == QLatin1String("full"), fb = b.policy == QLatin1String("full");
  if (fa != fb) return fa;
  if (a.policy != b.policy) return a.policy < b.policy;
  return a.budgetPerHead < b.budgetPerHead;
}

}  // namespace

EvaluateWindow::EvaluateWindow(QWidget* parent) : QWidget(parent, Qt::Window) {
  setObjectName(QStringLiteral("evaluateWindow"));
  setWindowTitle(tr("Mini evaluation — TrimKV Studio"));
  auto* layout = new QVBoxLayout(this);
  auto* intro = new QLabel(tr("Answers the questions of a small test set of the shapes world (generated here, the "
                              "same for the same seed) under the full cache and under each checked policy at several "
                              "budgets, "
                              "as <tt>trimkv eval-sweep</tt> does (gold history, exact-match scoring)."),
                           this);
  intro->setWordWrap(true);
  layout->addWidget(intro);

  auto* form = new QHBoxLayout;
  form->addWidget(new QLabel(tr("Conversations:"), this));
  m_conversations = new QSpinBox(this);
  m_conversations->setRange(1, 500);
  m_conversations->setValue(20);
  m_conversations->setToolTip(tr("How many conversations of the test split to generate and answer"));
  form->addWidget(m_conversations);
  form->addWidget(new QLabel(tr("Seed:"), this));
  m_seed = new QSpinBox(this);
  m_seed->setRange(0, 1'000'000);
  m_seed->setValue(7);
  m_seed->setToolTip(tr("The test set is a pure function of the seed: the same seed, the same questions"));
  form->addWidget(m_seed);
  form->addWidget(new QLabel(tr("Budgets (entries per head):"), this));
  m_budgets = new QLineEdit(QStringLiteral("4, 8, 16, 32"), this);
  m_budgets->setToolTip(tr("M, entries each KV head of each layer may keep, comma-separated (M_global = M·L·H_kv)"));
  form->addWidget(m_budgets, 1);
  layout->addLayout(form);
  auto* policyRow = new QHBoxLayout;
  policyRow->addWidget(new QLabel(tr("Policies:"), this), 0, Qt::AlignTop);
  m_policy = new QListWidget(this);
  m_policy->setToolTip(tr("The policies evaluated at each budget, one line each in the plot (the full cache is "
                          "always run as the reference)"));
  m_policy->setFlow(QListView::LeftToRight);
  m_policy->setWrapping(true);
  m_policy->setResizeMode(QListView::Adjust);
  m_policy->setSpacing(2);
  m_policy->setMaximumHeight(56);
  policyRow->addWidget(m_policy, 1);
  layout->addLayout(policyRow);

  auto* row = new QHBoxLayout;
  m_run = new QPushButton(tr("Run"), this);
  m_cancel = new QPushButton(tr("Cancel"), this);
  m_cancel->setToolTip(tr("Stop at the next token; the finished budgets stay in the table"));
  m_clear = new QPushButton(tr("Clear"), this);
  m_clear->setToolTip(tr("Forget the results of earlier runs"));
  m_exportPlot = new QPushButton(tr("Export plot…"), this);
  m_exportCsv = new QPushButton(tr("Export CSV…"), this);
  m_progress = new QProgressBar(this);
  m_progress->setRange(0, 1);
  m_progress->setValue(0);
  m_status = new QLabel(this);
  row->addWidget(m_run);
  row->addWidget(m_cancel);
  row->addWidget(m_progress, 1);
  row->addWidget(m_status, 1);
  row->addWidget(m_clear);
  row->addWidget(m_exportPlot);
  row->addWidget(m_exportCsv);
  layout->addLayout(row);

  auto* split = new QSplitter(Qt::Horizontal, this);
  auto* chart = new QChart;
  chart->setTitle(tr("Accuracy against KV budget"));
  m_chartView = new QChartView(chart, split);
  m_chartView->setRenderHint(QPainter::Antialiasing);
  m_chartView->setMinimumSize(560, 360);
  m_table = new QTableWidget(0, 8, split);
  m_table->setHorizontalHeaderLabels({tr("policy"), tr("M / head"), tr("M_global"), tr("accuracy"), tr("correct / n"),
                                      tr("failures"), tr("mean KV entries"), tr("seconds")});
  m_table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
  m_table->verticalHeader()->setVisible(false);
  split->addWidget(m_chartView);
  split->addWidget(m_table);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 2);
  split->setSizes({620, 480});
  layout->addWidget(split, 1);

  connect(m_run, &QPushButton::clicked, this, &EvaluateWindow::start);
  connect(m_cancel, &QPushButton::clicked, this, &EvaluateWindow::cancel);
  connect(m_clear, &QPushButton::clicked, this, &EvaluateWindow::clearResults);
  connect(m_exportPlot, &QPushButton::clicked, this, [this] { chooseExport(true); });
  connect(m_exportCsv, &QPushButton::clicked, this, [this] { chooseExport(false); });
  connect(m_budgets, &QLineEdit::textChanged, this, &EvaluateWindow::updateControls);
  connect(m_policy, &QListWidget::itemChanged, this, &EvaluateWindow::updateControls);
  resize(1100, 620);
  rebuildChart();
  updateControls();
}

QChart* EvaluateWindow::chart() const { return m_chartView->chart(); }

void EvaluateWindow::setPolicies(const std::vector<trimkv::PolicyDescription>& policies, const QString& current) {
  QStringList checked = checkedPolicies();
  if (checked.isEmpty()) checked << current;
  const QSignalBlocker block(m_policy);
  m_policy->clear();
  for (const trimkv::PolicyDescription& d : policies) {
    if (!d.uses_budget || d.name == "full") continue;
    auto* item = new QListWidgetItem(QString::fromStdString(d.name), m_policy);
    item->setToolTip(QString::fromStdString(d.summary) + (d.needs_gates ? tr(" (needs retention gates)") : QString()));
    item->setFlags(Qt::ItemIsUserCheckable | Qt::ItemIsEnabled);
    item->setCheckState(checked.contains(item->text()) ? Qt::Checked : Qt::Unchecked);
  }
  updateControls();
}

QStringList EvaluateWindow::checkedPolicies() const {
  QStringList out;
  for (int i = 0; i < m_policy->count(); ++i)
    if (m_policy->item(i)->checkState() == Qt::Checked) out << m_policy->item(i)->text();
  return out;
}

void EvaluateWindow::setCheckedPolicies(const QStringList& names) {
  for (int i = 0; i < m_policy->count(); ++i)
    m_policy->item(i)->setCheckState(names.contains(m_policy->item(i)->text()) ? Qt::Checked : Qt::Unchecked);
  updateControls();
}

QList<qint64> EvaluateWindow::budgets() const {
  QList<qint64> out;
  const QStringList parts = m_budgets->text().split(QLatin1Char(','), Qt::SkipEmptyParts);
  for (const QString& part : parts) {
    bool ok = false;
    const qint64 b = part.trimmed().toLongLong(&ok);
    if (!ok || b <= 0) return {};
    out << b;
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

EvalRequest EvaluateWindow::request() const {
  EvalRequest r;
  r.conversations = m_conversations->value();
  r.seed = static_cast<quint64>(m_seed->value());
  r.policies = checkedPolicies();
  r.budgets = budgets();
  return r;
}

void EvaluateWindow::start() {
  if (m_running || budgets().isEmpty() || checkedPolicies().isEmpty()) return;
  m_running = true;
  m_progress->setRange(0, 0);
  m_status->setText(tr("Starting…"));
  updateControls();
  Q_EMIT runRequested(request());
}

void EvaluateWindow::cancel() {
  if (!m_running) return;
  m_status->setText(tr("Cancelling…"));
  Q_EMIT cancelRequested();
}

void EvaluateWindow::clearResults() {
  m_cells.clear();
  rebuildTable();
  rebuildChart();
  updateControls();
}

void EvaluateWindow::onProgress(int done, int total, const QString& what) {
  if (!m_running) return;
  m_progress->setRange(0, std::max(total, 0));
  m_progress->setValue(std::min(done, std::max(total, 0)));
  m_status->setText(what);
}

void EvaluateWindow::onCell(const EvalCell& cell) {
  if (!m_running) return;
  auto same = [&](const EvalCell& c) {
    return c.policy == cell.policy && (cell.policy == QLatin1String("full") || c.budgetPerHead == cell.budgetPerHead);
  };
  m_cells.erase(std::remove_if(m_cells.begin(), m_cells.end(), same), m_cells.end());
  m_cells.push_back(cell);
  std::sort(m_cells.begin(), m_cells.end(), cellLess);
  rebuildTable();
  rebuildChart();
}

void EvaluateWindow::onFinished(bool cancelled) {
  if (!m_running) return;
  m_running = false;
  if (m_progress->maximum() == 0) m_progress->setRange(0, 1);
  if (!cancelled) m_progress->setValue(m_progress->maximum());
  m_status->setText(cancelled ? tr("Stopped; the finished budgets are in the table.") : tr("Done."));
  updateControls();
  Q_EMIT finished(cancelled);
}

void EvaluateWindow::rebuildTable() {
  m_table->setRowCount(static_cast<int>(m_cells.size()));
  for (int r = 0; r < static_cast<int>(m_cells.size()); ++r) {
    const EvalCell& c = m_cells[static_cast<size_t>(r)];
    const bool full = c.policy == QLatin1String("full");
    const QStringList values{c.policy,
                             full ? tr("—") : QString::number(c.budgetPerHead),
                             full ? tr("—") : QString::number(c.budgetGlobal),
                             QStringLiteral("%1%").arg(100.0 * c.accuracy, 0, 'f', 1),
                             QStringLiteral("%1 / %2").arg(c.correct).arg(c.n),
                             QString::number(c.failures),
                             QString::number(c.meanKvEntries, 'f', 0),
                             QString::number(c.seconds, 'f', 1)};
    for (int k = 0; k < values.size(); ++k) m_table->setItem(r, k, new QTableWidgetItem(values[k]));
  }
}

void EvaluateWindow::rebuildChart() {
  // The figure eval-sweep writes (app/charts): accuracy against the budget as % of the full cache's
  // peak, the global entries along the top.
  std::vector<budget_chart::Series> series;
  double fullValue = std::nan(""), fullEntries = 0;
  for (const EvalCell& c : m_cells) {
    if (c.policy == QLatin1String("full")) {
      fullValue = c.accuracy;
      fullEntries = static_cast<double>(c.maxKvEntries);
      continue;
    }
    trimkv::vision::world::add_plot_point(series, c.policy.toStdString(), static_cast<double>(c.budgetGlobal),
                                          c.accuracy);
  }
  budget_chart::draw(m_chartView->chart(), series, fullValue, fullEntries);
}

QByteArray EvaluateWindow::csv() const {
  QByteArray out = "policy,budget_per_head,budget_global,accuracy,correct,n,failures,mean_kv_entries,max_kv_entries,"
                   "seconds\n";
  for (const EvalCell& c : m_cells)
    out += QStringLiteral("%1,%2,%3,%4,%5,%6,%7,%8,%9,%10\n")
               .arg(c.policy)
               .arg(c.budgetPerHead)
               .arg(c.budgetGlobal)
               .arg(c.accuracy, 0, 'g', 6)
               .arg(c.correct)
               .arg(c.n)
               .arg(c.failures)
               .arg(c.meanKvEntries, 0, 'g', 8)
               .arg(c.maxKvEntries)
               .arg(c.seconds, 0, 'g', 6)
               .toUtf8();
  return out;
}

bool EvaluateWindow::exportPlot(const QString& path) {
  try {
    exportFigure(m_chartView, path, tr("Accuracy against KV budget"));
  } catch (const std::exception& e) {
    Q_EMIT errorOccurred(tr("Cannot export the plot"), QString::fromStdString(e.what()));
    return false;
  }
  return true;
}

bool EvaluateWindow::exportCsv(const QString& path) {
  try {
    writeFileAtomically(path, csv());
  } catch (const std::exception& e) {
    Q_EMIT errorOccurred(tr("Cannot export the table"), QString::fromStdString(e.what()));
    return false;
  }
  return true;
}

void EvaluateWindow::chooseExport(bool plot) {
  const QString path = plot ? QFileDialog::getSaveFileName(this, tr("Export the plot"), QStringLiteral("accuracy.png"),
                                                           tr("PNG image (*.png);;SVG drawing (*.svg)"))
                            : QFileDialog::getSaveFileName(this, tr("Export the table"), QStringLiteral("accuracy.csv"),
                                                           tr("CSV (*.csv)"));
  if (path.isEmpty()) return;
  if (plot) exportPlot(path);
  else exportCsv(path);
}

void EvaluateWindow::updateControls() {
  const bool ok = !budgets().isEmpty();
  m_budgets->setStyleSheet(ok ? QString() : QStringLiteral("QLineEdit { background: #fee2e2; color: #111; }"));
  m_run->setEnabled(!m_running && ok && !checkedPolicies().isEmpty());
  m_cancel->setEnabled(m_running);
  m_conversations->setEnabled(!m_running);
  m_seed->setEnabled(!m_running);
  m_policy->setEnabled(!m_running);
  m_budgets->setEnabled(!m_running);
  m_clear->setEnabled(!m_running && !m_cells.empty());
  m_exportPlot->setEnabled(!m_cells.empty());
  m_exportCsv->setEnabled(!m_cells.empty());
}
