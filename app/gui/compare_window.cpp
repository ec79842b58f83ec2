#include "compare_window.h"

#include <QComboBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QProgressBar>
#include <QPushButton>
#include <QScrollArea>
#include <QSpinBox>
#include <QSplitter>
#include <QTextBrowser>
#include <QMenu>
#include <QToolButton>
#include <QVBoxLayout>
#include <QWidgetAction>
#include <algorithm>

#include "head_grid.h"
#include "head_strip.h"
#include "image_overlay.h"
#include "modality_palette.h"
#include "policy_options_form.h"

namespace {
constexpr int kMaxBudget = 1 << 20;
}  // namespace

CompareWindow::CompareWindow(QWidget* parent) : QWidget(parent, Qt::Window) {
  setObjectName(QStringLiteral("compareWindow"));
  setWindowTitle(tr("Compare two eviction settings — TrimKV Studio"));
  auto* layout = new QVBoxLayout(this);
  auto* intro = new QLabel(tr("The conversation's questions are answered anew under setting <b>A</b> and under "
                              "setting <b>B</b>, on an engine of their own (the chat is not touched). Both compress "
                              "exactly at their budget. Answers that differ are marked; click a head on either side "
                              "to see it on both."),
                           this);
  intro->setWordWrap(true);
  layout->addWidget(intro);

  auto* split = new QSplitter(Qt::Horizontal, this);
  split->addWidget(buildPane(0));
  split->addWidget(buildPane(1));
  layout->addWidget(split, 1);

  auto* row = new QHBoxLayout;
  m_run = new QPushButton(tr("Run"), this);
  m_run->setToolTip(tr("Answer the conversation's questions under A, then under B"));
  m_cancel = new QPushButton(tr("Cancel"), this);
  m_cancel->setToolTip(tr("Stop the comparison at the next token"));
  m_progress = new QProgressBar(this);
  m_progress->setRange(0, 1);
  m_progress->setValue(0);
  m_status = new QLabel(tr("Choose A and B, then Run."), this);
  row->addWidget(m_run);
  row->addWidget(m_cancel);
  row->addWidget(m_progress, 1);
  row->addWidget(m_status, 2);
  layout->addLayout(row);
  connect(m_run, &QPushButton::clicked, this, &CompareWindow::start);
  connect(m_cancel, &QPushButton::clicked, this, &CompareWindow::cancel);
  resize(1280, 820);
  updateControls();
}

QWidget* CompareWindow::buildPane(int side) {
  Pane& p = m_panes[side];
  auto* box = new QWidget(this);
  auto* v = new QVBoxLayout(box);
  v->setContentsMargins(4, 4, 4, 4);
  auto* settings = new QHBoxLayout;
  settings->addWidget(new QLabel(side == 0 ? tr("<b>A</b> policy:") : tr("<b>B</b> policy:"), box));
  p.policy = new QComboBox(box);
  p.policy->setToolTip(tr("The eviction policy of this side"));
  settings->addWidget(p.policy, 1);
  p.optionsButton = new QToolButton(box);
  p.optionsButton->setText(tr("Options"));
  p.optionsButton->setToolTip(tr("The options of this side's policy (lookahead, floor, window, …)"));
  p.optionsButton->setPopupMode(QToolButton::InstantPopup);
  auto* optionsMenu = new QMenu(p.optionsButton);
  auto* optionsAction = new QWidgetAction(optionsMenu);
  p.options = new PolicyOptionsForm(optionsMenu);
  optionsAction->setDefaultWidget(p.options);
  optionsMenu->addAction(optionsAction);
  p.optionsButton->setMenu(optionsMenu);
  settings->addWidget(p.optionsButton);
  connect(p.options, &PolicyOptionsForm::optionsEdited, this, [this, side] { updateTitle(side); });
  settings->addWidget(new QLabel(tr("budget:"), box));
  p.budget = new QSpinBox(box);
  p.budget->setRange(1, kMaxBudget);
  p.budget->setValue(32);
  p.budget->setSuffix(tr(" entries/head"));
  p.budget->setToolTip(tr("M: KV entries each KV head of each layer may keep (M_global = M·L·H_kv over the model)"));
  settings->addWidget(p.budget);
  v->addLayout(settings);
  connect(p.policy, qOverload<int>(&QComboBox::currentIndexChanged), this, [this, side] {
    syncOptionsForm(side);
    updateControls();
  });
  connect(p.budget, qOverload<int>(&QSpinBox::valueChanged), this, [this, side] { updateTitle(side); });

  p.title = new QLabel(box);
  p.title->setWordWrap(true);
  v->addWidget(p.title);
  auto* inner = new QSplitter(Qt::Vertical, box);
  p.answers = new QTextBrowser(inner);
  p.answers->setObjectName(side == 0 ? QStringLiteral("compareAnswersA") : QStringLiteral("compareAnswersB"));
  p.grid = new HeadGrid(inner);
  p.grid->setToolTip(tr("Entries kept per layer (row) and KV head (column): bar length = entries, split by "
                        "modality (blue text, orange image, grey special). Click a head."));
  auto* stripBox = new QWidget(inner);
  auto* stripLayout = new QVBoxLayout(stripBox);
  stripLayout->setContentsMargins(0, 0, 0, 0);
  p.headLabel = new QLabel(tr("Head detail: click a cell above"), stripBox);
  stripLayout->addWidget(p.headLabel);
  auto* scroll = new QScrollArea(stripBox);
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  p.strip = new HeadStrip(scroll);
  scroll->setWidget(p.strip);
  stripLayout->addWidget(scroll, 1);
  p.overlay = new ImageOverlay(inner);
  inner->addWidget(p.answers);
  inner->addWidget(p.grid);
  inner->addWidget(stripBox);
  inner->addWidget(p.overlay);
  inner->setStretchFactor(0, 2);
  inner->setStretchFactor(1, 3);
  inner->setStretchFactor(2, 2);
  inner->setStretchFactor(3, 3);
  v->addWidget(inner, 1);
  connect(p.grid, &HeadGrid::headSelected, this, &CompareWindow::selectHead);
  updateTitle(side);
  return box;
}

void CompareWindow::setPolicies(const std::vector<trimkv::PolicyDescription>& policies) {
  m_policies = policies;
  for (Pane& p : m_panes) {
    const QString current = p.policy->currentData().toString();
    p.policy->clear();
    for (const trimkv::PolicyDescription& d : policies) {
      p.policy->addItem(QString::fromStdString(d.name), QString::fromStdString(d.name));
      p.policy->setItemData(p.policy->count() - 1, QString::fromStdString(d.summary), Qt::ToolTipRole);
    }
    const int i = p.policy->findData(current);
    if (i >= 0) p.policy->setCurrentIndex(i);
  }
  updateControls();
}

void CompareWindow::setSide(int side, const trimkv::EvictionSettings& settings) {
  Pane& p = m_panes[side];
  const int i = p.policy->findData(QString::fromStdString(settings.policy));
  if (i >= 0) p.policy->setCurrentIndex(i);
  syncOptionsForm(side);
  if (p.options->policy() == settings.policy) p.options->setOptions(settings.options);
  if (settings.budget_per_head) p.budget->setValue(static_cast<int>(std::min<int64_t>(*settings.budget_per_head, kMaxBudget)));
  updateControls();
}

trimkv::EvictionSettings CompareWindow::side(int side) const {
  const Pane& p = m_panes[side];
  trimkv::EvictionSettings s;
  s.policy = p.policy->currentData().toString().toStdString();
  if (s.policy.empty()) s.policy = "full";
  bool usesBudget = s.policy != "full";
  for (const trimkv::PolicyDescription& d : m_policies)
    if (d.name == s.policy) usesBudget = d.uses_budget;
  if (usesBudget) s.budget_per_head = p.budget->value();
  if (p.options->policy() == s.policy) s.options = p.options->options();
  s.slack = 0;  // compress exactly at the budget: both sides hold what their budget says
  return s;
}

void CompareWindow::start() {
  if (m_running) return;
  for (int s = 0; s < 2; ++s) {
    Pane& p = m_panes[s];
    p.questions.clear();
    p.answerTexts.clear();
    p.frame = InspectorFrame{};
    p.grid->setSnapshot(nullptr);
    p.strip->setFrame(nullptr, nullptr);
    p.overlay->setFrame({}, nullptr, nullptr);
    updateTitle(s);
  }
  showAnswers();
  selectHead(m_panes[0].grid->selectedLayer(), m_panes[0].grid->selectedHead());  // labels of the empty sides
  m_running = true;
  m_progress->setRange(0, 0);
  m_status->setText(tr("Starting…"));
  updateControls();
  Q_EMIT runRequested(side(0), side(1));
}

void CompareWindow::cancel() {
  if (!m_running) return;
  m_status->setText(tr("Cancelling…"));
  Q_EMIT cancelRequested();
}

QString CompareWindow::statusText() const { return m_status->text(); }

void CompareWindow::onProgress(int done, int total, const QString& what) {
  if (!m_running) return;
  m_progress->setRange(0, std::max(total, 0));
  m_progress->setValue(std::min(done, std::max(total, 0)));
  m_status->setText(what);
}

void CompareWindow::onAnswer(int side, int turn, const QString& question, const QString& answer) {
  if (!m_running || side < 0 || side > 1) return;
  Pane& p = m_panes[side];
  while (p.answerTexts.size() <= turn) {
    p.questions << QString();
    p.answerTexts << QString();
  }
  p.questions[turn] = question;
  p.answerTexts[turn] = answer;
  showAnswers();
}

void CompareWindow::onFrame(int side, const InspectorFrame& frame) {
  if (!m_running || side < 0 || side > 1 || !frame.kv) return;
  Pane& p = m_panes[side];
  p.frame = frame;
  p.grid->setSnapshot(frame.kv, frame.tokens.get());
  p.strip->setFrame(frame.kv, frame.tokens);
  p.overlay->setFrame(frame.state.images, frame.kv, frame.tokens);
  updateTitle(side);
  selectHead(p.grid->selectedLayer(), p.grid->selectedHead());
}

void CompareWindow::onFinished(bool cancelled) {
  if (!m_running) return;
  m_running = false;
  if (m_progress->maximum() == 0) m_progress->setRange(0, 1);
  m_status->setText(cancelled ? tr("Stopped: the sides show what was finished.") : tr("Done."));
  if (!cancelled) m_progress->setValue(m_progress->maximum());
  updateControls();
  Q_EMIT finished(cancelled);
}

void CompareWindow::selectHead(int layer, int head) {
  for (int s = 0; s < 2; ++s) {
    Pane& p = m_panes[s];
    if (p.grid->selectedLayer() != layer || p.grid->selectedHead() != head) {
      const QSignalBlocker block(p.grid);
      p.grid->setSelectedHead(layer, head);
    }
    p.strip->setHead(layer, head);
    p.overlay->setHead(layer, head);
    const int64_t n = p.frame.kv ? p.frame.kv->n_tokens : 0;
    p.headLabel->setText(tr("<b>Layer %1, KV head %2</b>: keeps %3 of %4 positions (bright: kept, faded: evicted)")
                             .arg(layer).arg(head).arg(p.strip->keptCount()).arg(n));
  }
}

void CompareWindow::showAnswers() {
  for (int s = 0; s < 2; ++s) {
    const Pane& p = m_panes[s];
    const Pane& other = m_panes[1 - s];
    QString html;
    for (int t = 0; t < p.answerTexts.size(); ++t) {
      const bool differs = t < other.answerTexts.size() && other.answerTexts[t] != p.answerTexts[t];
      html += QStringLiteral("<p><b>%1</b> %2<br>").arg(tr("Turn %1:").arg(t + 1), p.questions[t].toHtmlEscaped());
      if (differs)
        html += QStringLiteral("<span style='background:#fde68a;color:#111'>%1</span> <i>(%2)</i></p>")
                    .arg(p.answerTexts[t].toHtmlEscaped(), tr("differs from %1").arg(s == 0 ? QStringLiteral("B")
                                                                                          : QStringLiteral("A")));
      else
        html += p.answerTexts[t].toHtmlEscaped() + QStringLiteral("</p>");
    }
    p.answers->setHtml(html);
  }
}

void CompareWindow::updateTitle(int side) {
  const Pane& p = m_panes[side];
  const trimkv::EvictionSettings s = this->side(side);
  QString setting = QString::fromStdString(s.policy);
  for (const std::string& o : s.options) setting += QLatin1Char(' ') + QString::fromStdString(o);
  if (s.budget_per_head) setting += tr(", M = %1 entries per head").arg(*s.budget_per_head);
  QString held;
  if (p.frame.kv)
    held = tr(" — holds %1 of %2 entries (%3 tokens × %4 heads); text %5, image %6, special %7")
               .arg(p.frame.kv->total_entries)
               .arg(p.frame.kv->n_tokens * static_cast<int64_t>(p.frame.kv->heads.size()))
               .arg(p.frame.kv->n_tokens)
               .arg(p.frame.kv->heads.size())
               .arg(p.frame.kv->totals.text)
               .arg(p.frame.kv->totals.image)
               .arg(p.frame.kv->totals.special);
  p.title->setText(QStringLiteral("<b>%1</b>: %2%3").arg(side == 0 ? QStringLiteral("A") : QStringLiteral("B"),
                                                           setting.toHtmlEscaped(), held));
}

void CompareWindow::syncOptionsForm(int side) {
  Pane& p = m_panes[side];
  const std::string policy = p.policy->currentData().toString().toStdString();
  if (p.options->policy() != policy)
    for (const trimkv::PolicyDescription& d : m_policies)
      if (d.name == policy) p.options->setPolicy(d);
}

void CompareWindow::updateControls() {
  for (int s = 0; s < 2; ++s) {
    Pane& p = m_panes[s];
    p.policy->setEnabled(!m_running);
    const trimkv::EvictionSettings settings = side(s);
    p.budget->setEnabled(!m_running && settings.budget_per_head.has_value());
    p.optionsButton->setEnabled(!m_running && !p.options->optionNames().isEmpty());
    if (!m_running) updateTitle(s);
  }
  m_run->setEnabled(!m_running && !m_policies.empty());
  m_cancel->setEnabled(m_running);
}
