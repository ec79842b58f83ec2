#include "image_overlay.h"

#include <QPainter>
#include <algorithm>
#include <cmath>

#include "modality_palette.h"

ImageOverlay::ImageOverlay(QWidget* parent) : QWidget(parent) {
  setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Expanding);
  setToolTip(tr("The last image with the patches the model saw: the selected head keeps the clear, "
                "outlined patches and has evicted the darkened ones."));
}

void ImageOverlay::setFrame(const std::vector<trimkv::ImageRecord>& images,
                            std::shared_ptr<const trimkv::KvSnapshot> kv,
                            std::shared_ptr<const std::vector<trimkv::vision::StreamToken>> tokens) {
  m_kv = std::move(kv);
  m_tokens = std::move(tokens);
  m_record = images.empty() ? trimkv::ImageRecord{} : images.back();
  const QString path = QString::fromStdString(m_record.source);
  if (path != m_imagePath) {
    m_imagePath = path;
    m_image = path.isEmpty() ? QImage() : QImage(path);
  }
  rebuild();
  update();
}

void ImageOverlay::setHead(int layer, int head) {
  m_layer = layer;
  m_head = head;
  rebuild();
  update();
}

int ImageOverlay::patchCount() const {
  return m_record.image_id < 0 ? 0 : m_record.n_tiles * gridRows() * gridCols();
}

int ImageOverlay::gridRows() const { return std::max(m_record.grid_rows > 0 ? m_record.grid_rows : m_record.grid_side, 1); }
int ImageOverlay::gridCols() const { return std::max(m_record.grid_cols > 0 ? m_record.grid_cols : m_record.grid_side, 1); }

void ImageOverlay::setAllHeads(bool all) {
  m_all = all;
  rebuild();
  update();
}

void ImageOverlay::rebuild() {
  m_kept.clear();
  m_keepers.clear();
  if (!m_kv || !m_tokens || m_record.image_id < 0) return;
  // The image's positions only: the head's kept bits and the snapshot's keeper counts.
  const auto& g = m_kv->geometry;
  const trimkv::HeadSnapshot* hs = m_layer < g.n_layer && m_head < g.n_kv_head ? &m_kv->head(m_layer, m_head) : nullptr;
  for (const trimkv::vision::StreamToken& t : *m_tokens) {
    const trimkv::TokenInfo& i = t.info;
    if (i.modality != trimkv::Modality::Image || i.image_id != m_record.image_id) continue;
    const qint64 k = key(i.tile, i.patch_row, i.patch_col);
    const size_t index = static_cast<size_t>(i.token_index);
    if (m_all && index < m_kv->keepers.size()) m_keepers[k] = m_kv->keepers[index];
    if (hs && hs->kept(i.token_index)) m_kept.insert(k);
  }
}

void ImageOverlay::drawView(QPainter& p, const QRectF& target, bool global) {
  const trimkv::ImageRecord& r = m_record;
  if (!m_image.isNull()) p.drawImage(target, m_image);
  else p.fillRect(target, palette().color(QPalette::Mid));
  const int gs = std::max(r.grid_side, 1);
  const int nSplit = r.tile_rows * r.tile_cols;
  const QColor edge = ModalityPalette::image();
  const int nHeads = m_kv ? std::max<int>(static_cast<int>(m_kv->heads.size()), 1) : 1;
  QVector<QRect> outlines;  // kept patches, drawn in one call after the loop (whole pixels: fast)
  auto drawPatch = [&](const QRectF& exact, int tile, int row, int col) {
    // Whole pixels, edge to edge: shared edges round alike, so neighbouring shades neither
    // overlap (a darker seam) nor leave a gap (a light one) at any widget size.
    const QRectF cell(QPointF(std::round(exact.left()), std::round(exact.top())),
                      QPointF(std::round(exact.right()), std::round(exact.bottom())));
    if (m_all) {
      const int c = m_keepers.value(key(tile, row, col), 0);
      p.fillRect(cell, QColor(0, 0, 0, static_cast<int>(170 * (1.0 - static_cast<double>(c) / nHeads))));
      if (c > 0 && cell.width() >= 16 && cell.height() >= 12) {
        p.setPen(edge);
        p.drawText(cell, Qt::AlignCenter, QString::number(c));
      }
      return;
    }
    if (m_kept.contains(key(tile, row, col))) outlines.push_back(cell.toRect().adjusted(0, 0, -1, -1));
    else p.fillRect(cell, QColor(0, 0, 0, 150));
  };
  // Runs at the end of drawView, whichever branch drew the patches: each outline as four solid
  // fills (the raster engine's fast path; a pen per rectangle cost ~8 ms for 1,300 patches).
  struct Outline {
    QPainter& p;
    const QVector<QRect>& rects;
    QColor edge;
    ~Outline() {
      for (const QRect& r : rects) {
        const int t = r.width() >= 6 && r.height() >= 6 ? 2 : 1;
        p.fillRect(QRect(r.left(), r.top(), r.width(), t), edge);
        p.fillRect(QRect(r.left(), r.bottom() - t + 1, r.width(), t), edge);
        p.fillRect(QRect(r.left(), r.top(), t, r.height()), edge);
        p.fillRect(QRect(r.right() - t + 1, r.top(), t, r.height()), edge);
      }
    }
  } outline{p, outlines, edge};
  if (global) {
    // The last tile (or the only one) covers the whole image: squeezed to a square tile, or an
    // any-resolution image's own grid of rows x columns.
    const int tile = r.n_tiles - 1, rows = gridRows(), cols = gridCols();
    const double cw = target.width() / cols, ch = target.height() / rows;
    for (int row = 0; row < rows; ++row)
      for (int col = 0; col < cols; ++col)
        drawPatch(QRectF(target.left() + col * cw, target.top() + row * ch, cw, ch), tile, row, col);
    return;
  }
  // Split tiles: tile t covers tile_size² pixels of the resized image at its (row, col).
  const double sx = target.width() / std::max(r.resized_width, 1), sy = target.height() / std::max(r.resized_height, 1);
  const double side = static_cast<double>(r.tile_size) / gs;
  for (int t = 0; t < nSplit; ++t) {
    const double x0 = (t % r.tile_cols) * r.tile_size, y0 = (t / r.tile_cols) * r.tile_size;
    for (int row = 0; row < gs; ++row)
      for (int col = 0; col < gs; ++col)
        drawPatch(QRectF(target.left() + (x0 + col * side) * sx, target.top() + (y0 + row * side) * sy, side * sx, side * sy),
                  t, row, col);
  }
}

void ImageOverlay::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setRenderHint(QPainter::SmoothPixmapTransform);
  if (m_record.image_id < 0) {
    p.setPen(palette().color(QPalette::PlaceholderText));
    p.drawText(rect(), Qt::AlignCenter, tr("No image in the conversation yet."));
    return;
  }
  const bool split = m_record.tile_rows * m_record.tile_cols > 0 && m_record.n_tiles > 1;
  const int captionH = fontMetrics().height() + 6;
  const QRectF area(4, 4, width() - 8, height() - 8 - captionH);
  const int views = split ? 2 : 1;
  const double gap = 10;
  const double viewW = (area.width() - gap * (views - 1)) / views;
  // Tiles view keeps the resized image's aspect; the global view is what the model saw (square).
  auto fit = [&](double aspect, double left) {
    double w = viewW, h = viewW / aspect;
    if (h > area.height()) {
      h = area.height();
      w = h * aspect;
    }
    return QRectF(left + (viewW - w) / 2, area.top() + (area.height() - h) / 2, w, h);
  };
  if (split) {
    const double aspect = static_cast<double>(std::max(m_record.resized_width, 1)) / std::max(m_record.resized_height, 1);
    drawView(p, fit(aspect, area.left()), false);
    drawView(p, fit(1.0, area.left() + viewW + gap), true);
  } else {
    // A tile is square as the model saw it; an any-resolution image keeps its resized aspect.
    const double aspect = m_record.tile_size > 0
                              ? 1.0
                              : static_cast<double>(std::max(m_record.resized_width, 1)) / std::max(m_record.resized_height, 1);
    drawView(p, fit(aspect, area.left()), true);
  }
  p.setPen(palette().color(QPalette::WindowText));
  const QString caption = tr("Image %1 · %2×%3 px · %4 patches%5 · layer %6 head %7 keeps %8 of them")
                              .arg(m_record.image_id + 1)
                              .arg(m_record.width)
                              .arg(m_record.height)
                              .arg(patchCount())
                              .arg(split ? tr(" (%1 tiles + global)").arg(m_record.tile_rows * m_record.tile_cols) : QString())
                              .arg(m_layer)
                              .arg(m_head)
                              .arg(m_kept.size());
  const QString text = m_all ? tr("Image %1 · %2×%3 px · %4 patches · number: heads (of %5) keeping the patch")
                                   .arg(m_record.image_id + 1)
                                   .arg(m_record.width)
                                   .arg(m_record.height)
                                   .arg(patchCount())
                                   .arg(nHeadsTotal())
                             : caption;
  p.drawText(QRectF(4, height() - captionH, width() - 8, captionH), Qt::AlignCenter, text);
}
