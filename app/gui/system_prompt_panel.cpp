#include "system_prompt_panel.h"

#include <QHBoxLayout>
#include <QLabel>
#include <QPlainTextEdit>
#include <QTimer>
#include <QToolButton>
#include <QVBoxLayout>

namespace {
constexpr int kDebounceMs = 300;
constexpr int kHeaderChars = 48;
}  // namespace

SystemPromptPanel::SystemPromptPanel(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->setSpacing(2);
  auto* header = new QHBoxLayout;
  m_toggle = new QToolButton(this);
  m_toggle->setCheckable(true);
  m_toggle->setAutoRaise(true);
  m_toggle->setToolButtonStyle(Qt::ToolButtonTextBesideIcon);
  m_toggle->setToolTip(tr("Instructions the model reads before the conversation (a \"System:\" turn "
                          "of the chat template)"));
  m_note = new QLabel(this);
  m_note->setObjectName(QStringLiteral("systemPromptNote"));
  QPalette quiet = m_note->palette();
  quiet.setColor(QPalette::WindowText, quiet.color(QPalette::PlaceholderText));
  m_note->setPalette(quiet);
  header->addWidget(m_toggle);
  header->addWidget(m_note, 1);
  layout->addLayout(header);
  m_edit = new QPlainTextEdit(this);
  m_edit->setPlaceholderText(tr("e.g. You are a careful assistant. Answer in one sentence."));
  m_edit->setMaximumHeight(70);
  m_edit->setTabChangesFocus(true);
  layout->addWidget(m_edit);

  m_debounce = new QTimer(this);
  m_debounce->setSingleShot(true);
  m_debounce->setInterval(kDebounceMs);
  connect(m_debounce, &QTimer::timeout, this, [this] { Q_EMIT textEdited(text()); });
  connect(m_edit, &QPlainTextEdit::textChanged, this, [this] {
    updateHeader();
    m_debounce->start();
  });
  connect(m_toggle, &QToolButton::toggled, this, &SystemPromptPanel::setExpanded);
  setExpanded(false);
}

QString SystemPromptPanel::text() const { return m_edit->toPlainText().trimmed(); }

void SystemPromptPanel::setText(const QString& text) {
  m_edit->blockSignals(true);
  m_edit->setPlainText(text);
  m_edit->blockSignals(false);
  updateHeader();
}

void SystemPromptPanel::setExpanded(bool expanded) {
  m_toggle->blockSignals(true);
  m_toggle->setChecked(expanded);
  m_toggle->blockSignals(false);
  m_toggle->setArrowType(expanded ? Qt::DownArrow : Qt::RightArrow);
  m_edit->setVisible(expanded);
  updateHeader();
}

bool SystemPromptPanel::isExpanded() const { return m_toggle->isChecked(); }

void SystemPromptPanel::setConversationState(bool started, const QString& inUse) {
  m_started = started;
  m_inUse = inUse;
  updateHeader();
}

QString SystemPromptPanel::note() const { return m_note->text(); }

void SystemPromptPanel::updateHeader() {
  const QString t = text();
  QString title = tr("System prompt");
  if (!isExpanded()) {
    QString shown = t.simplified();
    if (shown.size() > kHeaderChars) shown = shown.left(kHeaderChars) + QStringLiteral("…");
    title += shown.isEmpty() ? tr(": none") : QStringLiteral(": ") + shown;
  }
  m_toggle->setText(title);
  if (!m_started) m_note->setText(t.isEmpty() ? QString() : tr("(used from the first message)"));
  else if (t != m_inUse) m_note->setText(tr("(changed: applies from the next new conversation)"));
  else m_note->setText(QString());
}
