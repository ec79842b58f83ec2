// The chat transcript as the user sees it: the system message (if any), user turns with image
// thumbnails, assistant answers rendered as Markdown, the answer in flight streamed into the last
// message. Holds display text only; the conversation itself lives in the worker's engine.
// Links in the view: "Edit" under a user message (editRequested with its 0-based number among
// the user messages) and every thumbnail (imageClicked with the file); other links open outside.
#pragma once
#include <QStringList>
#include <QTextBrowser>
#include <QVector>

class ConversationView : public QTextBrowser {
  Q_OBJECT

 public:
  enum class Role { System, User, Assistant };
  struct Entry {
    Role role = Role::User;
    QString text;
    QStringList images;
    bool streaming = false;
    QString note;
    bool showThinking = false;  // a thinking model's reasoning unfolded
  };

  explicit ConversationView(QWidget* parent = nullptr);

  void addSystemMessage(const QString& text);
  void addUserMessage(const QString& text, const QStringList& images);
  void beginAnswer();                       // an empty, streaming assistant message
  void appendToAnswer(const QString& text);  // to the streaming message
  void finishAnswer(const QString& note);    // note: e.g. "stopped" (empty: none)
  // Removes the last user message and any answer after it (a turn the engine refused), and the
  // system message when nothing else is left (the engine keeps it only with a user turn).
  void dropLastTurn();
  // Removes the trailing assistant message, if any (its answer is being regenerated).
  void dropLastAnswer();
  // Keeps only what comes before user message `userTurn` (0-based among user messages).
  void truncateBeforeUserTurn(int userTurn);
  void clearConversation();
  // Whether the Edit links are offered (not while an answer is being generated).
  void setEditingEnabled(bool enabled);

  bool endsWithAnswer() const;
  int messageCount() const;  // user and assistant messages (the system message is not counted)
  int userMessageCount() const;
  bool hasSystemMessage() const { return !m_entries.isEmpty() && m_entries.front().role == Role::System; }
  QString lastAnswer() const;
  // User message `userTurn` (0-based among user messages); a default Entry when there is none.
  Entry userMessage(int userTurn) const;
  // Everything shown, to put back after a request that failed.
  const QVector<Entry>& entries() const { return m_entries; }
  void setEntries(const QVector<Entry>& entries);

  // Thinking models (thinking.h): answers start inside a <think> block the template opened.
  // Their reasoning is shown folded under a "Thinking" line (unfolded while it streams), apart
  // from the answer (lastAnswer() keeps the whole text, as generated).
  void setAnswersOpenThinking(bool opens);
  // Unfolds / folds the reasoning of message `index` (of entries()), as its link does.
  void toggleThinking(int index);

  // The link an Edit action / a thumbnail / a Thinking line carries.
  static QUrl editLink(int userTurn);
  static QUrl imageLink(const QString& path);
  static QUrl thinkingLink(int index);

 Q_SIGNALS:
  void editRequested(int userTurn);
  void imageClicked(const QString& path);

 private:
  void onAnchor(const QUrl& url);
  void render();

  QVector<Entry> m_entries;
  bool m_editing = true;
  bool m_opensThinking = false;
};
