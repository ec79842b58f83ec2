// A conversation image at full size (clicking a thumbnail opens it): the picture at 100% in a
// scroll area, with its file name, size and path. Non-modal; closes itself (WA_DeleteOnClose).
#pragma once
#include <QDialog>
#include <QImage>

class QLabel;

class ImageViewer : public QDialog {
  Q_OBJECT

 public:
  explicit ImageViewer(const QString& path, QWidget* parent = nullptr);

  const QImage& image() const { return m_image; }  // null when the file could not be read
  QSize shownSize() const;                         // of the picture on screen

 private:
  QImage m_image;
  QLabel* m_picture = nullptr;
};
