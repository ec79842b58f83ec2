// The system prompt, above the conversation: a header that folds the editor away ("System
// prompt: <first words>") and the editor itself. The text is the system message of the next
// fresh conversation (the engine adds it before the first user turn after New conversation, or
// to the next turn when the conversation is still empty); the panel says which applies. Edits are
// reported through textEdited after a short pause.
#pragma once
#include <QWidget>

class QLabel;
class QPlainTextEdit;
class QTimer;
class QToolButton;

class SystemPromptPanel : public QWidget {
  Q_OBJECT

 public:
  explicit SystemPromptPanel(QWidget* parent = nullptr);

  QString text() const;
  void setText(const QString& text);  // no textEdited
  void setExpanded(bool expanded);
  bool isExpanded() const;
  // Whether the conversation on screen has started (then edits wait for New conversation) and
  // the system message it began with.
  void setConversationState(bool started, const QString& inUse);
  QString note() const;

 Q_SIGNALS:
  void textEdited(const QString& text);

 private:
  void updateHeader();

  QToolButton* m_toggle = nullptr;
  QLabel* m_note = nullptr;
  QPlainTextEdit* m_edit = nullptr;
  QTimer* m_debounce = nullptr;
  bool m_started = false;
  QString m_inUse;
};
