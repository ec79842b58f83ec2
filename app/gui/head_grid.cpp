#include "head_grid.h"

#include <QHelpEvent>
#include <QMouseEvent>
#include <QPainter>
#include <QToolTip>
#include <algorithm>

#include "modality_palette.h"

namespace {
constexpr int kLabelLeft = 34;  // "L12" labels
constexpr int kLabelTop = 18;   // "h0" labels
constexpr int kMaxCellW = 120, kMaxCellH = 48, kMinCell = 2;
// The gap between cells: 2 px, 1 when cells get small, none below 4 px (the grid always fits
// its widget: 64 layers in a short pane are rows of 2-3 px).
int gapFor(int cell) { return cell >= 8 ? 2 : cell >= 4 ? 1 : 0; }
}  // namespace

HeadGrid::HeadGrid(QWidget* parent) : QWidget(parent) {
  setMouseTracking(true);
  setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Expanding);
  setToolTip(tr("One cell per layer and KV head: the entries (one token's K and V in that head) "
                "it keeps, text in blue, image in orange, special in grey. Click for its detail."));
}

void HeadGrid::setSnapshot(std::shared_ptr<const trimkv::KvSnapshot> kv,
                           const std::vector<trimkv::vision::StreamToken>* tokens) {
  m_kv = std::move(kv);
  m_stream = {};
  if (tokens)
    for (const trimkv::vision::StreamToken& t : *tokens) m_stream.add(t.info.modality);
  else if (m_kv)
    m_stream.text = m_kv->n_tokens;
  if (m_selLayer >= layerCount() || m_selHead >= headCount()) {
    m_selLayer = 0;
    m_selHead = 0;
  }
  update();
}

int HeadGrid::layerCount() const { return m_kv ? m_kv->geometry.n_layer : 0; }
int HeadGrid::headCount() const { return m_kv ? m_kv->geometry.n_kv_head : 0; }

trimkv::ModalityCounts HeadGrid::cellCounts(int layer, int head) const {
  if (!m_kv || layer < 0 || head < 0 || layer >= layerCount() || head >= headCount()) return {};
  const size_t i = static_cast<size_t>(layer * headCount() + head);
  if (i >= m_kv->heads.size()) return {};
  return m_kv->heads[i].counts;
}

void HeadGrid::setMode(Mode mode) {
  m_mode = mode;
  update();
}

bool HeadGrid::showsHeatmap() const {
  if (m_mode != Mode::Auto) return m_mode == Mode::Heatmap;
  const Layout lay = layout();
  return lay.cellW < 26 || lay.cellH < 12;  // no room for a bar's number
}

double HeadGrid::keptFraction(int layer, int head, const trimkv::Modality* modality) const {
  const trimkv::ModalityCounts c = cellCounts(layer, head);
  if (!modality) return m_stream.total() > 0 ? static_cast<double>(c.total()) / static_cast<double>(m_stream.total()) : 0.0;
  const int64_t kept = *modality == trimkv::Modality::Text ? c.text : *modality == trimkv::Modality::Image ? c.image : c.special;
  const int64_t all = *modality == trimkv::Modality::Text    ? m_stream.text
                      : *modality == trimkv::Modality::Image ? m_stream.image
                                                             : m_stream.special;
  return all > 0 ? static_cast<double>(kept) / static_cast<double>(all) : 0.0;
}

void HeadGrid::setSelectedHead(int layer, int head) {
  if (layer < 0 || head < 0 || layer >= layerCount() || head >= headCount()) return;
  if (layer == m_selLayer && head == m_selHead) return;
  m_selLayer = layer;
  m_selHead = head;
  update();
  Q_EMIT headSelected(layer, head);
}

QSize HeadGrid::sizeHint() const {
  const int l = std::max(layerCount(), 4), h = std::max(headCount(), 4);
  return {kLabelLeft + h * 44, kLabelTop + l * 22};
}

QSize HeadGrid::minimumSizeHint() const {
  const int l = std::max(layerCount(), 1), h = std::max(headCount(), 1);
  return {kLabelLeft + h * kMinCell, kLabelTop + l * kMinCell};
}

HeadGrid::Layout HeadGrid::layout() const {
  Layout lay;
  lay.left = kLabelLeft;
  lay.top = kLabelTop;
  const int l = std::max(layerCount(), 1), h = std::max(headCount(), 1);
  lay.cellW = std::clamp((width() - kLabelLeft) / h, kMinCell, kMaxCellW);
  lay.cellH = std::clamp((height() - kLabelTop) / l, kMinCell, kMaxCellH);
  return lay;
}

bool HeadGrid::cellAt(const QPoint& p, int& layer, int& head) const {
  if (!m_kv) return false;
  const Layout lay = layout();
  if (p.x() < lay.left || p.y() < lay.top) return false;
  head = (p.x() - lay.left) / lay.cellW;
  layer = (p.y() - lay.top) / lay.cellH;
  return layer < layerCount() && head < headCount();
}

void HeadGrid::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setRenderHint(QPainter::Antialiasing, false);
  const QPalette pal = palette();
  if (!m_kv || layerCount() == 0) {
    p.setPen(pal.color(QPalette::PlaceholderText));
    p.drawText(rect(), Qt::AlignCenter, tr("No KV cache yet: send a message."));
    return;
  }
  const Layout lay = layout();
  const int L = layerCount(), H = headCount();
  int64_t maxCount = 1;
  for (const auto& h : m_kv->heads) maxCount = std::max(maxCount, h.counts.total());

  QFont small = font();
  small.setPointSizeF(std::max(6.5, small.pointSizeF() * 0.8));
  p.setFont(small);
  p.setPen(pal.color(QPalette::WindowText));
  for (int h = 0; h < H; ++h) {
    if (lay.cellW >= 18 || h % 4 == 0)
      p.drawText(QRect(lay.left + h * lay.cellW, 0, lay.cellW, lay.top), Qt::AlignCenter, QStringLiteral("h%1").arg(h));
  }
  // Row labels: every row when there is room, else every 4th, each centred on its row in a box
  // tall enough for the text (a box of the row's height would clip it).
  const int textH = p.fontMetrics().height();
  const int every = lay.cellH >= 12 ? 1 : std::max(4, (textH + lay.cellH - 1) / std::max(lay.cellH, 1));
  for (int l = 0; l < L; l += every) {
    const int mid = lay.top + l * lay.cellH + lay.cellH / 2;
    p.drawText(QRect(0, mid - textH / 2, lay.left - 4, textH), Qt::AlignRight | Qt::AlignVCenter,
               QStringLiteral("L%1").arg(l));
  }

  const QColor empty = pal.color(QPalette::Base).darker(108);
  const bool heat = showsHeatmap();
  for (int l = 0; l < L; ++l) {
    for (int h = 0; h < H; ++h) {
      const QRect cell(lay.left + h * lay.cellW, lay.top + l * lay.cellH, lay.cellW - gapFor(lay.cellW),
                       lay.cellH - gapFor(lay.cellH));
      p.fillRect(cell, empty);
      if (heat) paintHeat(p, cell, l, h);
      else paintBars(p, cell, cellCounts(l, h), maxCount);
      if (l == m_selLayer && h == m_selHead) {
        p.setPen(QPen(pal.color(QPalette::Highlight), 2));
        p.drawRect(cell.adjusted(1, 1, -1, -1));
      }
    }
  }
}

void HeadGrid::paintBars(QPainter& p, const QRect& cell, const trimkv::ModalityCounts& c, int64_t maxCount) const {
  // Bar: total length relative to the fullest head, split by modality.
  const double scale = static_cast<double>(cell.width()) / static_cast<double>(maxCount);
  int x = cell.left();
  const int64_t parts[3] = {c.text, c.image, c.special};
  const QColor colors[3] = {ModalityPalette::text(), ModalityPalette::image(), ModalityPalette::special()};
  double acc = 0;
  for (int k = 0; k < 3; ++k) {
    acc += static_cast<double>(parts[k]) * scale;
    const int x1 = cell.left() + static_cast<int>(acc + 0.5);
    if (x1 > x) p.fillRect(QRect(x, cell.top(), x1 - x, cell.height()), colors[k]);
    x = std::max(x, x1);
  }
  if (cell.width() >= 26 && cell.height() >= 12) {
    p.setPen(Qt::black);
    p.drawText(cell, Qt::AlignCenter, QString::number(c.total()));
  }
}

void HeadGrid::paintHeat(QPainter& p, const QRect& cell, int layer, int head) const {
  // Colour: the fraction of the conversation's positions the head keeps (the β ramp: dark = few).
  p.fillRect(cell, ModalityPalette::ramp(keptFraction(layer, head)));
  // Along the bottom: the kept entries' text / image / special split.
  const trimkv::ModalityCounts c = cellCounts(layer, head);
  const int stripe = cell.height() >= 9 ? 3 : cell.height() >= 6 ? 2 : 0;
  if (stripe > 0 && c.total() > 0) {
    const double w = static_cast<double>(cell.width()) / static_cast<double>(c.total());
    const int xText = cell.left() + static_cast<int>(c.text * w + 0.5);
    const int xImage = cell.left() + static_cast<int>((c.text + c.image) * w + 0.5);
    const int y = cell.bottom() - stripe + 1;
    p.fillRect(QRect(cell.left(), y, xText - cell.left(), stripe), ModalityPalette::text());
    p.fillRect(QRect(xText, y, xImage - xText, stripe), ModalityPalette::image());
    p.fillRect(QRect(xImage, y, cell.right() + 1 - xImage, stripe), ModalityPalette::special());
  }
  if (cell.width() >= 30 && cell.height() >= 14) {
    const double f = keptFraction(layer, head);
    p.setPen(f > 0.6 ? Qt::black : Qt::white);
    p.drawText(cell.adjusted(0, 0, 0, -stripe), Qt::AlignCenter, QStringLiteral("%1%").arg(100.0 * f, 0, 'f', 0));
  }
}

QString HeadGrid::tooltipFor(int l, int h) const {
  const trimkv::ModalityCounts c = cellCounts(l, h);
  QString tip = tr("Layer %1, KV head %2\n%3 entries kept: %4 text, %5 image, %6 special")
                    .arg(l).arg(h).arg(c.total()).arg(c.text).arg(c.image).arg(c.special);
  if (m_kv && m_kv->n_tokens > 0) {
    const trimkv::Modality text = trimkv::Modality::Text, image = trimkv::Modality::Image;
    tip += tr("\nkeeps %1% of the conversation's %2 positions").arg(100.0 * keptFraction(l, h), 0, 'f', 1).arg(m_stream.total());
    if (m_stream.text > 0) tip += tr("\n  text: %1% of %2").arg(100.0 * keptFraction(l, h, &text), 0, 'f', 1).arg(m_stream.text);
    if (m_stream.image > 0)
      tip += tr("\n  image: %1% of %2").arg(100.0 * keptFraction(l, h, &image), 0, 'f', 1).arg(m_stream.image);
  }
  if (m_kv && m_kv->budget_global > 0 && !m_kv->heads.empty())
    tip += tr("\nbudget: M_global = %1 entries over %2 heads (M = %3 per head on average)")
               .arg(m_kv->budget_global)
               .arg(m_kv->heads.size())
               .arg(m_kv->budget_global / static_cast<int64_t>(m_kv->heads.size()));
  return tip;
}

void HeadGrid::mousePressEvent(QMouseEvent* event) {
  int l = 0, h = 0;
  if (event->button() == Qt::LeftButton && cellAt(event->position().toPoint(), l, h)) setSelectedHead(l, h);
}

bool HeadGrid::event(QEvent* event) {
  if (event->type() == QEvent::ToolTip) {
    auto* help = static_cast<QHelpEvent*>(event);
    int l = 0, h = 0;
    if (cellAt(help->pos(), l, h)) {
      QToolTip::showText(help->globalPos(), tooltipFor(l, h), this);
    } else {
      QToolTip::showText(help->globalPos(), toolTip(), this);
    }
    return true;
  }
  return QWidget::event(event);
}
