#include "figure_export.h"

#include <QBuffer>
#include <QFileInfo>
#include <QPainter>
#include <QPixmap>
#include <QSvgGenerator>
#include <QWidget>

#include "atomic_file.h"
#include "trimkv/core/error.h"

FigureFormat figureFormatOf(const QString& path) {
  const QString suffix = QFileInfo(path).suffix().toLower();
  if (suffix == QLatin1String("png")) return FigureFormat::Png;
  if (suffix == QLatin1String("svg")) return FigureFormat::Svg;
  TRIMKV_FAIL(Input, "cannot export a figure as '", path.toStdString(), "': the name must end in .png or .svg");
}

void exportFigure(QWidget* widget, const QString& path, const QString& title) {
  const FigureFormat format = figureFormatOf(path);
  TRIMKV_CHECK(widget && !widget->size().isEmpty(), Input, "nothing to export to '", path.toStdString(),
               "': the view is not shown");
  QByteArray bytes;
  QBuffer buffer(&bytes);
  buffer.open(QIODevice::WriteOnly);
  if (format == FigureFormat::Png) {
    const QPixmap pixels = widget->grab();
    TRIMKV_CHECK(pixels.save(&buffer, "PNG"), Io, "cannot encode the figure for '", path.toStdString(), "'");
  } else {
    QSvgGenerator svg;
    svg.setOutputDevice(&buffer);
    svg.setSize(widget->size());
    svg.setViewBox(QRect(QPoint(0, 0), widget->size()));
    svg.setTitle(title);
    svg.setDescription(QStringLiteral("TrimKV Studio"));
    QPainter painter(&svg);
    widget->render(&painter, QPoint(), QRegion(), QWidget::DrawWindowBackground | QWidget::DrawChildren);
    painter.end();
  }
  buffer.close();
  writeFileAtomically(path, bytes);
}
