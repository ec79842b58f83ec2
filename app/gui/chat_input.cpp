#include "chat_input.h"

#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFileInfo>
#include <QImage>
#include <QMimeData>
#include <QUrl>

ChatInput::ChatInput(QWidget* parent) : QPlainTextEdit(parent) {
  setAcceptDrops(true);
  setPlaceholderText(tr("Type a message… (Ctrl+Return sends; drop or paste images here)"));
}

bool ChatInput::isImageFile(const QString& path) {
  static const QStringList kSuffixes = {"png", "jpg", "jpeg", "bmp", "gif"};
  const QFileInfo info(path);
  return info.isFile() && kSuffixes.contains(info.suffix().toLower());
}

QStringList ChatInput::imagePaths(const QMimeData* source) const {
  QStringList paths;
  if (!source->hasUrls()) return paths;
  for (const QUrl& url : source->urls())
    if (url.isLocalFile() && isImageFile(url.toLocalFile())) paths << url.toLocalFile();
  return paths;
}

bool ChatInput::canInsertFromMimeData(const QMimeData* source) const {
  return !imagePaths(source).isEmpty() || source->hasImage() || QPlainTextEdit::canInsertFromMimeData(source);
}

void ChatInput::insertFromMimeData(const QMimeData* source) {
  const QStringList paths = imagePaths(source);
  if (!paths.isEmpty()) {
    Q_EMIT imagesAdded(paths);
    return;
  }
  if (source->hasImage() && m_pasted.isValid()) {
    const QImage image = qvariant_cast<QImage>(source->imageData());
    const QString path = m_pasted.filePath(QStringLiteral("pasted-%1.png").arg(++m_pastedCount));
    if (!image.isNull() && image.save(path, "PNG")) {
      Q_EMIT imagesAdded({path});
      return;
    }
  }
  QPlainTextEdit::insertFromMimeData(source);
}

void ChatInput::dragEnterEvent(QDragEnterEvent* event) {
  if (!imagePaths(event->mimeData()).isEmpty()) event->acceptProposedAction();
  else QPlainTextEdit::dragEnterEvent(event);
}

void ChatInput::dragMoveEvent(QDragMoveEvent* event) {
  if (!imagePaths(event->mimeData()).isEmpty()) event->acceptProposedAction();
  else QPlainTextEdit::dragMoveEvent(event);
}

void ChatInput::dropEvent(QDropEvent* event) {
  const QStringList paths = imagePaths(event->mimeData());
  if (!paths.isEmpty()) {
    event->acceptProposedAction();
    Q_EMIT imagesAdded(paths);
    return;
  }
  QPlainTextEdit::dropEvent(event);
}
