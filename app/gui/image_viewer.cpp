#include "image_viewer.h"

#include <QDialogButtonBox>
#include <QFileInfo>
#include <QGuiApplication>
#include <QImageReader>
#include <QLabel>
#include <QPixmap>
#include <QScreen>
#include <QScrollArea>
#include <QVBoxLayout>

ImageViewer::ImageViewer(const QString& path, QWidget* parent) : QDialog(parent) {
  setAttribute(Qt::WA_DeleteOnClose);
  setObjectName(QStringLiteral("imageViewer"));
  setWindowTitle(QFileInfo(path).fileName());
  QImageReader reader(path);
  reader.setAutoTransform(true);  // EXIF orientation, as the model saw it
  m_image = reader.read();

  auto* layout = new QVBoxLayout(this);
  auto* scroll = new QScrollArea(this);
  scroll->setAlignment(Qt::AlignCenter);
  m_picture = new QLabel(scroll);
  m_picture->setAlignment(Qt::AlignCenter);
  auto* info = new QLabel(this);
  info->setTextInteractionFlags(Qt::TextSelectableByMouse);
  if (m_image.isNull()) {
    m_picture->setText(tr("Cannot read the image: %1").arg(reader.errorString()));
    info->setText(path);
  } else {
    m_picture->setPixmap(QPixmap::fromImage(m_image));
    m_picture->resize(m_image.size());
    info->setText(tr("%1 × %2 px · %3").arg(m_image.width()).arg(m_image.height()).arg(path));
  }
  scroll->setWidget(m_picture);
  layout->addWidget(scroll, 1);
  layout->addWidget(info);
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close, this);
  connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::close);
  layout->addWidget(buttons);

  // Big enough for the picture at 100%, within the screen.
  QSize want = m_image.isNull() ? QSize(400, 200) : m_image.size() + QSize(60, 110);
  if (const QScreen* screen = QGuiApplication::primaryScreen())
    want = want.boundedTo(screen->availableSize() * 0.9);
  resize(want.expandedTo(QSize(320, 240)));
}

QSize ImageViewer::shownSize() const {
  return m_picture->pixmap().isNull() ? QSize() : m_picture->pixmap().deviceIndependentSize().toSize();
}
