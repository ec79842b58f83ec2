// The message editor: plain text, plus image files dropped onto it or images pasted into it
// (pasted pixels are saved as PNG files in a folder that lives as long as the editor), reported
// through imagesAdded instead of being inserted as text.
#pragma once
#include <QPlainTextEdit>
#include <QStringList>
#include <QTemporaryDir>

class ChatInput : public QPlainTextEdit {
  Q_OBJECT

 public:
  explicit ChatInput(QWidget* parent = nullptr);

  static bool isImageFile(const QString& path);

 Q_SIGNALS:
  void imagesAdded(const QStringList& paths);

 protected:
  bool canInsertFromMimeData(const QMimeData* source) const override;
  void insertFromMimeData(const QMimeData* source) override;
  void dragEnterEvent(QDragEnterEvent* event) override;
  void dragMoveEvent(QDragMoveEvent* event) override;
  void dropEvent(QDropEvent* event) override;

 private:
  QStringList imagePaths(const QMimeData* source) const;
  QTemporaryDir m_pasted;
  int m_pastedCount = 0;
};
