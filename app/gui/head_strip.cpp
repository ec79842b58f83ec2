#include "head_strip.h"

#include <QHelpEvent>
#include <QPaintEvent>
#include <QPainter>
#include <QWheelEvent>
#include <QToolTip>
#include <algorithm>
#include <cmath>
#include <limits>

#include "modality_palette.h"

namespace {
constexpr int kRowH = 14, kRowGap = 3, kMinCellW = 3, kMaxCellW = 12;
constexpr int kBandH = 5;  // the β / score band at the bottom of a kept cell
constexpr int kZoomSteps[] = {1, 2, 3, 4, 6, 8, 12, 16, 24};  // fixed cell widths

// A token's text for a tooltip: visible whitespace, at most a few dozen characters.
QString shownText(const std::string& text) {
  QString t = QString::fromStdString(text);
  t.replace(QLatin1Char('\n'), QStringLiteral("⏎")).replace(QLatin1Char('\t'), QStringLiteral("⇥"));
  if (t.size() > 40) t = t.left(40) + QStringLiteral("…");
  return t;
}
}  // namespace

HeadStrip::HeadStrip(QWidget* parent) : QWidget(parent) {
  setMouseTracking(true);
  QSizePolicy sp(QSizePolicy::Expanding, QSizePolicy::Preferred);
  sp.setHeightForWidth(true);
  setSizePolicy(sp);
}

void HeadStrip::setFrame(std::shared_ptr<const trimkv::KvSnapshot> kv,
                         std::shared_ptr<const std::vector<trimkv::vision::StreamToken>> tokens) {
  m_kv = std::move(kv);
  m_tokens = std::move(tokens);
  rebuildIndex();
  relayout();
}

void HeadStrip::relayout() {
  updateGeometry();
  setMinimumHeight(heightForWidth(width()));
  update();
}

void HeadStrip::setCellWidth(int pixels) {
  m_fixedCell = pixels <= 0 ? 0 : std::clamp(pixels, kZoomSteps[0], kZoomSteps[std::size(kZoomSteps) - 1]);
  relayout();
}

void HeadStrip::zoomIn() {
  const int now = cellWidth(width());
  for (int w : kZoomSteps)
    if (w > now) return setCellWidth(w);
}

void HeadStrip::zoomOut() {
  const int now = cellWidth(width());
  for (auto it = std::rbegin(kZoomSteps); it != std::rend(kZoomSteps); ++it)
    if (*it < now) return setCellWidth(*it);
}

void HeadStrip::wheelEvent(QWheelEvent* event) {
  if (!(event->modifiers() & Qt::ControlModifier)) return QWidget::wheelEvent(event);  // scrolls
  if (event->angleDelta().y() > 0) zoomIn();
  else if (event->angleDelta().y() < 0) zoomOut();
  event->accept();
}

void HeadStrip::setHead(int layer, int head) {
  m_layer = layer;
  m_head = head;
  rebuildIndex();
  update();
}

void HeadStrip::setAllHeads(bool all) {
  m_all = all;
  rebuildIndex();
  update();
}

void HeadStrip::setShade(Shade shade) {
  m_shade = shade;
  update();
}

void HeadStrip::rebuildIndex() {
  m_entryOf.clear();
  m_hasScores = false;
  if (!m_kv) return;
  const size_t n = static_cast<size_t>(std::max<int64_t>(m_kv->n_tokens, 0));
  m_entryOf.assign(n, -1);
  const auto& g = m_kv->geometry;
  if (m_layer >= g.n_layer || m_head >= g.n_kv_head) return;
  const trimkv::HeadSnapshot& hs = m_kv->head(m_layer, m_head);
  m_scoreMin = std::numeric_limits<float>::max();
  m_scoreMax = std::numeric_limits<float>::lowest();
  for (size_t i = 0; i < hs.entries.size(); ++i) {
    const trimkv::SnapshotEntry& e = hs.entries[i];
    if (e.token_index >= 0 && static_cast<size_t>(e.token_index) < n) m_entryOf[static_cast<size_t>(e.token_index)] = static_cast<int32_t>(i);
    if (std::isfinite(e.score)) {
      m_hasScores = true;
      m_scoreMin = std::min(m_scoreMin, e.score);
      m_scoreMax = std::max(m_scoreMax, e.score);
    }
  }
}

int32_t HeadStrip::keepersAt(size_t position) const {
  return position < m_kv->keepers.size() ? m_kv->keepers[position] : 0;
}

int HeadStrip::keptCount() const {
  if (m_all) {
    if (!m_kv) return 0;
    const std::vector<int32_t>& k = m_kv->keepers;
    return static_cast<int>(std::count_if(k.begin(), k.end(), [](int32_t c) { return c > 0; }));
  }
  return static_cast<int>(std::count_if(m_entryOf.begin(), m_entryOf.end(), [](int32_t i) { return i >= 0; }));
}

const trimkv::SnapshotEntry* HeadStrip::entryAt(int position) const {
  if (m_all || position < 0 || static_cast<size_t>(position) >= m_entryOf.size()) return nullptr;
  const int32_t e = m_entryOf[static_cast<size_t>(position)];
  return e >= 0 ? &m_kv->head(m_layer, m_head).entries[static_cast<size_t>(e)] : nullptr;
}

double HeadStrip::shadeOf(int position) const {
  const double none = std::numeric_limits<double>::quiet_NaN();
  const trimkv::SnapshotEntry* e = entryAt(position);
  if (!e) return none;
  switch (m_shade) {
    case Shade::None: return none;
    case Shade::Beta: return std::exp(static_cast<double>(e->log_beta));
    case Shade::Score:
      if (!m_hasScores || !std::isfinite(e->score)) return none;
      return m_scoreMax > m_scoreMin ? (e->score - m_scoreMin) / (m_scoreMax - m_scoreMin) : 1.0;
  }
  return none;
}

int HeadStrip::cellWidth(int width) const {
  if (m_fixedCell > 0) return m_fixedCell;
  const int n = std::max<int>(static_cast<int>(m_entryOf.size()), 1);
  return std::clamp(width / n, kMinCellW, kMaxCellW);
}

int HeadStrip::perRow(int width) const { return std::max(1, width / cellWidth(width)); }

int HeadStrip::heightForWidth(int width) const {
  const int n = static_cast<int>(m_entryOf.size());
  const int rows = std::max(1, (n + perRow(width) - 1) / perRow(width));
  return rows * (kRowH + kRowGap);
}

QSize HeadStrip::sizeHint() const { return {400, heightForWidth(400)}; }

void HeadStrip::resizeEvent(QResizeEvent* event) {
  QWidget::resizeEvent(event);
  setMinimumHeight(heightForWidth(width()));
}

QRect HeadStrip::cellRect(int position) const {
  const int cw = cellWidth(width()), per = perRow(width());
  const int gap = cw >= 5 ? 1 : 0;  // narrow cells touch
  return QRect((position % per) * cw, (position / per) * (kRowH + kRowGap), cw - gap, kRowH);
}

int HeadStrip::positionAt(const QPoint& p) const {
  const int cw = cellWidth(width()), per = perRow(width());
  const int col = p.x() / cw, row = p.y() / (kRowH + kRowGap);
  if (col >= per || p.y() % (kRowH + kRowGap) >= kRowH) return -1;
  const int pos = row * per + col;
  return pos < static_cast<int>(m_entryOf.size()) ? pos : -1;
}

void HeadStrip::paintEvent(QPaintEvent* event) {
  QPainter p(this);
  if (m_entryOf.empty()) {
    p.setPen(palette().color(QPalette::PlaceholderText));
    p.drawText(rect(), Qt::AlignLeft | Qt::AlignVCenter, tr("No tokens yet."));
    return;
  }
  // The rows the exposed region touches, nothing else (inside a scroll area: the viewport).
  const int per = perRow(width()), rowH = kRowH + kRowGap;
  const int firstRow = std::max(0, event->rect().top() / rowH), lastRow = event->rect().bottom() / rowH;
  const size_t begin = static_cast<size_t>(firstRow) * static_cast<size_t>(per);
  const size_t end = std::min(m_entryOf.size(), static_cast<size_t>(lastRow + 1) * static_cast<size_t>(per));
  for (size_t t = begin; t < end; ++t) {
    const int pos = static_cast<int>(t);
    const QRect cell = cellRect(pos);
    QColor c = ModalityPalette::unknown();
    if (m_tokens && t < m_tokens->size()) c = ModalityPalette::of((*m_tokens)[t].info.modality);
    if (m_all) {
      // Shade by the share of heads that keep the position: faded = none, full colour = all.
      const double share = static_cast<double>(keepersAt(t)) / std::max<size_t>(m_kv->heads.size(), 1);
      QColor shaded = c;
      shaded.setAlpha(static_cast<int>(55 + 200 * share));
      p.fillRect(cell, shaded);
    } else if (const trimkv::SnapshotEntry* e = entryAt(pos)) {
      p.fillRect(cell, ModalityPalette::of(e->modality));  // kept: its own modality, exact
      const double v = shadeOf(pos);
      if (!std::isnan(v)) p.fillRect(cell.adjusted(0, kRowH - kBandH, 0, 0), ModalityPalette::ramp(v));
    } else {
      p.fillRect(cell, ModalityPalette::faded(c));
    }
  }
}

QString HeadStrip::tooltipFor(int position) const {
  if (position < 0 || static_cast<size_t>(position) >= m_entryOf.size()) return {};
  QString tip = tr("Position %1").arg(position);
  if (m_tokens && static_cast<size_t>(position) < m_tokens->size()) {
    const trimkv::vision::StreamToken& tok = (*m_tokens)[static_cast<size_t>(position)];
    tip += tok.id >= 0 ? tr(": “%1” (token %2)").arg(shownText(tok.text)).arg(tok.id)
                       : tr(" (being generated)");
    const trimkv::TokenInfo& info = tok.info;
    tip += tr("\n%1, message %2").arg(QString::fromLatin1(trimkv::modality_name(info.modality))).arg(info.turn);
    if (info.image_id >= 0 && info.modality == trimkv::Modality::Image)
      tip += tr("\nimage %1, tile %2, patch row %3 col %4").arg(info.image_id).arg(info.tile).arg(info.patch_row).arg(info.patch_col);
  }
  if (m_all) {
    tip += tr("\nkept by %1 of %2 heads").arg(keepersAt(static_cast<size_t>(position))).arg(m_kv->heads.size());
  } else if (const trimkv::SnapshotEntry* e = entryAt(position)) {
    tip += tr("\nkept by layer %1 head %2\nβ = %3 (log β = %4): its retention shrinks by this factor each step")
               .arg(m_layer)
               .arg(m_head)
               .arg(std::exp(static_cast<double>(e->log_beta)), 0, 'f', 4)
               .arg(e->log_beta, 0, 'f', 4);
    if (std::isfinite(e->score)) tip += tr("\nscore = %1 (the policy keeps the highest)").arg(e->score, 0, 'g', 4);
  } else {
    tip += tr("\nevicted by layer %1 head %2").arg(m_layer).arg(m_head);
  }
  return tip;
}

bool HeadStrip::event(QEvent* event) {
  if (event->type() == QEvent::ToolTip) {
    auto* help = static_cast<QHelpEvent*>(event);
    const QString tip = tooltipFor(positionAt(help->pos()));
    if (tip.isEmpty()) {
      QToolTip::hideText();
      event->ignore();
      return true;
    }
    QToolTip::showText(help->globalPos(), tip, this);
    return true;
  }
  return QWidget::event(event);
}
