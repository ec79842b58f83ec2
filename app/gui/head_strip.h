// The head detail: every position of the conversation's token stream, in order and wrapped into
// rows, for one (layer, KV head): kept positions in their modality's colour, evicted ones faded.
// A kept position also carries a band in the β / score ramp (modality_palette.h): β = exp(log β)
// of its entry (the retention gate's per-step keep factor; 1 = never forgotten), or the policy's
// score scaled over the head's kept entries (lowest to highest). Hover names the position: its
// token text, modality, message and image patch, and for kept entries β and score. Zoom (Ctrl +
// wheel, zoomIn / zoomOut, or a fixed cell width) from 1 to 24 pixels per position; "fit" (the
// default) sizes cells to the width. Only the exposed rows are painted, so a 16K-position
// conversation scrolls at the cost of what is on screen.
#pragma once
#include <QWidget>
#include <memory>
#include <vector>

#include "session_types.h"

class HeadStrip : public QWidget {
  Q_OBJECT

 public:
  enum class Shade { None, Beta, Score };

  explicit HeadStrip(QWidget* parent = nullptr);

  void setFrame(std::shared_ptr<const trimkv::KvSnapshot> kv,
                std::shared_ptr<const std::vector<trimkv::vision::StreamToken>> tokens);
  void setHead(int layer, int head);
  // All heads: each position shaded by how many (layer, KV head) pairs keep it.
  void setAllHeads(bool all);
  void setShade(Shade shade);
  Shade shade() const { return m_shade; }
  int keptCount() const;  // positions kept by the selected head (all heads: by at least one)
  // The band's value in [0, 1] for `position` under the current shade; NaN when it has none
  // (evicted, no score, shade None, all-heads mode).
  double shadeOf(int position) const;
  QString tooltipFor(int position) const;  // what hovering the position shows
  QRect cellRect(int position) const;      // where the position is drawn
  // Pixels per position: 0 = fit the width (3..12), else fixed (1..24).
  void setCellWidth(int pixels);
  int cellWidthSetting() const { return m_fixedCell; }
  int shownCellWidth() const { return cellWidth(width()); }
  void zoomIn();   // the next wider step (from fit: the width now shown)
  void zoomOut();

  bool hasHeightForWidth() const override { return true; }
  int heightForWidth(int width) const override;
  QSize sizeHint() const override;

 protected:
  void paintEvent(QPaintEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;
  void wheelEvent(QWheelEvent* event) override;
  bool event(QEvent* event) override;

 private:
  int cellWidth(int width) const;
  int perRow(int width) const;
  int positionAt(const QPoint& p) const;  // -1 when none
  void rebuildIndex();
  const trimkv::SnapshotEntry* entryAt(int position) const;  // the selected head's, or null

  void relayout();  // height for the width after a change of cells or zoom

  std::shared_ptr<const trimkv::KvSnapshot> m_kv;
  std::shared_ptr<const std::vector<trimkv::vision::StreamToken>> m_tokens;
  int m_fixedCell = 0;
  int m_layer = 0, m_head = 0;
  std::vector<int32_t> m_entryOf;  // [n_tokens]: index into the head's entries, -1 if evicted
  bool m_all = false;
  // Heads keeping `position` (all-heads mode): the snapshot's keeper counts (make_snapshot).
  int32_t keepersAt(size_t position) const;
  Shade m_shade = Shade::Beta;
  float m_scoreMin = 0, m_scoreMax = 0;  // finite scores of the selected head's entries
  bool m_hasScores = false;
};
