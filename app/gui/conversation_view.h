// The chat transcript as the user sees it: user turns with image thumbnails, assistant answers
// rendered as Markdown, the answer in flight streamed into the last message. Holds display text
// only; the conversation itself lives in the worker's engine.
#pragma once
#include <QStringList>
#include <QTextBrowser>
#include <QVector>

class ConversationView : public QTextBrowser {
  Q_OBJECT

 public:
  explicit ConversationView(QWidget* parent = nullptr);

  void addUserMessage(const QString& text, const QStringList& images);
  void beginAnswer();                       // an empty, streaming assistant message
  void appendToAnswer(const QString& text);  // to the streaming message
  void finishAnswer(const QString& note);    // note: e.g. "stopped" (empty: none)
  // Removes the last user message and any answer after it (a turn the engine refused).
  void dropLastTurn();
  // Removes the trailing assistant message, if any (its answer is being regenerated).
  void dropLastAnswer();
  void clearConversation();

  bool endsWithAnswer() const;
  int messageCount() const { return m_messages.size(); }
  QString lastAnswer() const;

 private:
  struct Message {
    bool user = false;
    QString text;
    QStringList images;
    bool streaming = false;
    QString note;
  };
  void render();

  QVector<Message> m_messages;
};
