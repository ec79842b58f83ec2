#include "head_strip.h"

#include <QHelpEvent>
#include <QPainter>
#include <QToolTip>
#include <algorithm>
#include <cmath>

#include "modality_palette.h"

namespace {
constexpr int kRowH = 14, kRowGap = 3, kMinCellW = 3, kMaxCellW = 12;
}

HeadStrip::HeadStrip(QWidget* parent) : QWidget(parent) {
  setMouseTracking(true);
  QSizePolicy sp(QSizePolicy::Expanding, QSizePolicy::Preferred);
  sp.setHeightForWidth(true);
  setSizePolicy(sp);
}

void HeadStrip::setFrame(std::shared_ptr<const trimkv::KvSnapshot> kv,
                         std::shared_ptr<const std::vector<TokenSlot>> tokens) {
  m_kv = std::move(kv);
  m_tokens = std::move(tokens);
  rebuildIndex();
  updateGeometry();
  setMinimumHeight(heightForWidth(width()));
  update();
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

void HeadStrip::rebuildIndex() {
  m_entryOf.clear();
  m_keepers.clear();
  if (!m_kv) return;
  const size_t n = static_cast<size_t>(std::max<int64_t>(m_kv->n_tokens, 0));
  if (m_all) {
    m_keepers.assign(n, 0);
    for (const trimkv::HeadSnapshot& hs : m_kv->heads)
      for (const trimkv::SnapshotEntry& e : hs.entries)
        if (e.token_index >= 0 && static_cast<size_t>(e.token_index) < n) ++m_keepers[static_cast<size_t>(e.token_index)];
  }
  m_entryOf.assign(static_cast<size_t>(std::max<int64_t>(m_kv->n_tokens, 0)), -1);
  const auto& g = m_kv->geometry;
  if (m_layer >= g.n_layer || m_head >= g.n_kv_head) return;
  const trimkv::HeadSnapshot& hs = m_kv->head(m_layer, m_head);
  for (size_t i = 0; i < hs.entries.size(); ++i) {
    const int32_t t = hs.entries[i].token_index;
    if (t >= 0 && static_cast<size_t>(t) < m_entryOf.size()) m_entryOf[static_cast<size_t>(t)] = static_cast<int32_t>(i);
  }
}

int HeadStrip::keptCount() const {
  if (m_all) return static_cast<int>(std::count_if(m_keepers.begin(), m_keepers.end(), [](int32_t c) { return c > 0; }));
  return static_cast<int>(std::count_if(m_entryOf.begin(), m_entryOf.end(), [](int32_t i) { return i >= 0; }));
}

int HeadStrip::cellWidth(int width) const {
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

int HeadStrip::positionAt(const QPoint& p) const {
  const int cw = cellWidth(width()), per = perRow(width());
  const int col = p.x() / cw, row = p.y() / (kRowH + kRowGap);
  if (col >= per || p.y() % (kRowH + kRowGap) >= kRowH) return -1;
  const int pos = row * per + col;
  return pos < static_cast<int>(m_entryOf.size()) ? pos : -1;
}

void HeadStrip::paintEvent(QPaintEvent*) {
  QPainter p(this);
  if (m_entryOf.empty()) {
    p.setPen(palette().color(QPalette::PlaceholderText));
    p.drawText(rect(), Qt::AlignLeft | Qt::AlignVCenter, tr("No tokens yet."));
    return;
  }
  const int cw = cellWidth(width()), per = perRow(width());
  const int gap = cw >= 5 ? 1 : 0;
  for (size_t t = 0; t < m_entryOf.size(); ++t) {
    const int row = static_cast<int>(t) / per, col = static_cast<int>(t) % per;
    const QRect cell(col * cw, row * (kRowH + kRowGap), cw - gap, kRowH);
    QColor c = ModalityPalette::unknown();
    if (m_tokens && t < m_tokens->size() && (*m_tokens)[t].known) c = ModalityPalette::of((*m_tokens)[t].modality);
    if (m_all) {
      // Shade by the share of heads that keep the position: faded = none, full colour = all.
      const double share = static_cast<double>(m_keepers[t]) / std::max<size_t>(m_kv->heads.size(), 1);
      QColor shaded = c;
      shaded.setAlpha(static_cast<int>(55 + 200 * share));
      p.fillRect(cell, shaded);
    } else if (m_entryOf[t] >= 0) {
      // Kept: its own modality is exact (from the entry).
      c = ModalityPalette::of(m_kv->head(m_layer, m_head).entries[static_cast<size_t>(m_entryOf[t])].modality);
      p.fillRect(cell, c);
    } else {
      p.fillRect(cell, ModalityPalette::faded(c));
    }
  }
}

bool HeadStrip::event(QEvent* event) {
  if (event->type() == QEvent::ToolTip) {
    auto* help = static_cast<QHelpEvent*>(event);
    const int pos = positionAt(help->pos());
    if (pos < 0) {
      QToolTip::hideText();
      event->ignore();
      return true;
    }
    const TokenSlot slot = (m_tokens && static_cast<size_t>(pos) < m_tokens->size()) ? (*m_tokens)[static_cast<size_t>(pos)]
                                                                                  : TokenSlot{};
    QString tip = tr("Position %1 (token index %1)").arg(pos);
    if (slot.known) {
      tip += tr("\n%1, turn %2").arg(QString::fromLatin1(trimkv::modality_name(slot.modality))).arg(slot.turn);
      if (slot.imageId >= 0)
        tip += tr("\nimage %1, tile %2, patch row %3 col %4").arg(slot.imageId).arg(slot.tile).arg(slot.patchRow).arg(slot.patchCol);
    } else {
      tip += tr("\nmodality unknown (evicted by every head before it was shown)");
    }
    const int32_t e = m_entryOf[static_cast<size_t>(pos)];
    if (m_all) {
      tip += tr("\nkept by %1 of %2 heads").arg(m_keepers[static_cast<size_t>(pos)]).arg(m_kv->heads.size());
    } else if (e >= 0) {
      const trimkv::SnapshotEntry& entry = m_kv->head(m_layer, m_head).entries[static_cast<size_t>(e)];
      tip += tr("\nkept by layer %1 head %2, log β = %3").arg(m_layer).arg(m_head).arg(entry.log_beta, 0, 'f', 3);
      if (!std::isnan(entry.score)) tip += tr(", score = %1").arg(entry.score, 0, 'g', 4);
    } else {
      tip += tr("\nevicted by layer %1 head %2").arg(m_layer).arg(m_head);
    }
    QToolTip::showText(help->globalPos(), tip, this);
    return true;
  }
  return QWidget::event(event);
}
