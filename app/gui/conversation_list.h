// The side list of saved conversations: the autosave file (when it holds one) and the
// conversation files saved or opened lately (QSettings "conversations/recent", newest first, at
// most kMax, those that still exist). Clicking one asks to open it (openRequested); the main
// window replays it under the current settings, as File > Open conversation does.
#pragma once
#include <QString>
#include <QStringList>
#include <QWidget>

class QListWidget;
class QListWidgetItem;

class ConversationList : public QWidget {
  Q_OBJECT

 public:
  static constexpr int kMax = 12;

  explicit ConversationList(QWidget* parent = nullptr);

  void setAutosaveFile(const QString& path);  // "" = none
  // Puts `path` at the top of the recent files (kept in QSettings) and refreshes.
  void addRecent(const QString& path);
  static QStringList recentFiles();
  // Reads the folder state again (the autosave file may have appeared).
  void refresh();
  QListWidget* list() const { return m_list; }
  // The file of row `row`, or "".
  QString pathAt(int row) const;

 Q_SIGNALS:
  void openRequested(const QString& path);

 private:
  QListWidget* m_list = nullptr;
  QString m_autosave;
};
