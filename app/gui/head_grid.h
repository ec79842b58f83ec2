// The layers × KV heads heatmap of the inspector: one cell per (layer, KV head) showing how many
// entries that head keeps, as a bar split into text / image / special (modality_palette.h) whose
// length is the count relative to the fullest head. Click selects a head (headSelected); hover
// shows the numbers. Draws the snapshot it is given and nothing else.
#pragma once
#include <QWidget>
#include <memory>

#include "trimkv/core/snapshot.h"

class HeadGrid : public QWidget {
  Q_OBJECT

 public:
  explicit HeadGrid(QWidget* parent = nullptr);

  void setSnapshot(std::shared_ptr<const trimkv::KvSnapshot> kv);
  int layerCount() const;
  int headCount() const;
  // What cell (layer, head) shows; zero counts outside the grid.
  trimkv::ModalityCounts cellCounts(int layer, int head) const;
  int selectedLayer() const { return m_selLayer; }
  int selectedHead() const { return m_selHead; }
  void setSelectedHead(int layer, int head);  // emits headSelected when it changes

  QSize sizeHint() const override;
  QSize minimumSizeHint() const override;

 Q_SIGNALS:
  void headSelected(int layer, int head);

 protected:
  void paintEvent(QPaintEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;
  bool event(QEvent* event) override;

 private:
  struct Layout {
    int left = 0, top = 0, cellW = 0, cellH = 0;
  };
  Layout layout() const;
  // (layer, head) under a widget point, or false.
  bool cellAt(const QPoint& p, int& layer, int& head) const;

  std::shared_ptr<const trimkv::KvSnapshot> m_kv;
  int m_selLayer = 0, m_selHead = 0;
};
