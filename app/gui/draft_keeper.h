// The message being written, kept on disk while it is typed: a conversation file of one user
// message (conversation_file.h, its images copied beside it), written a moment after the last
// change and at once by flush() (the window's close), and read back at the next start. So what
// the user typed, and the pictures attached to it (pasted ones too, which live in a temporary
// folder), survive a closed window, a crash or a kill.
#pragma once
#include <QObject>
#include <QString>
#include <QStringList>
#include <QTimer>
#include <functional>

class DraftKeeper : public QObject {
  Q_OBJECT

 public:
  struct Draft {
    QString text;
    QStringList images;  // image files (from load(): the copies beside the file that still exist)
  };
  // `current` gives the draft as it is now.
  explicit DraftKeeper(std::function<Draft()> current, QObject* parent = nullptr);

  void setFile(const QString& path);  // "" (the default) keeps nothing

  void changed();  // the text or the attachments changed: written after kDelayMs
  void flush();    // a write that is due happens now
  // The draft on file (empty when there is none or the file cannot be read).
  Draft load() const;

  static constexpr int kDelayMs = 700;

 Q_SIGNALS:
  // A write failed (disk full, folder not writable): the message names the file.
  void failed(const QString& message);

 private:
  void write();
  std::function<Draft()> m_current;
  QString m_path;
  QTimer m_timer;
};
