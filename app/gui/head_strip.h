// The head detail: every position of the conversation's token stream, in order and wrapped into
// rows, for one (layer, KV head): kept positions in their modality's colour, evicted ones faded.
// Hover names the position, its token index and modality, and for kept entries log β and the
// policy's score.
#pragma once
#include <QWidget>
#include <memory>
#include <vector>

#include "session_types.h"

class HeadStrip : public QWidget {
  Q_OBJECT

 public:
  explicit HeadStrip(QWidget* parent = nullptr);

  void setFrame(std::shared_ptr<const trimkv::KvSnapshot> kv, std::shared_ptr<const std::vector<TokenSlot>> tokens);
  void setHead(int layer, int head);
  // All heads: each position shaded by how many (layer, KV head) pairs keep it.
  void setAllHeads(bool all);
  int keptCount() const;  // positions kept by the selected head (all heads: by at least one)

  bool hasHeightForWidth() const override { return true; }
  int heightForWidth(int width) const override;
  QSize sizeHint() const override;

 protected:
  void paintEvent(QPaintEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;
  bool event(QEvent* event) override;

 private:
  int cellWidth(int width) const;
  int perRow(int width) const;
  int positionAt(const QPoint& p) const;  // -1 when none
  void rebuildIndex();

  std::shared_ptr<const trimkv::KvSnapshot> m_kv;
  std::shared_ptr<const std::vector<TokenSlot>> m_tokens;
  int m_layer = 0, m_head = 0;
  std::vector<int32_t> m_entryOf;  // [n_tokens]: index into the head's entries, -1 if evicted
  bool m_all = false;
  std::vector<int32_t> m_keepers;  // [n_tokens]: heads keeping each position (all-heads mode)
};
