// The layers × KV heads grid of the inspector: one cell per (layer, KV head) showing how many
// entries that head keeps, either as a bar split into text / image / special (modality_palette.h)
// whose length is the count relative to the fullest head, or (heatmap) coloured by the fraction of
// the conversation's tokens the head keeps, with a thin text / image split along its bottom. Auto
// picks the heatmap once cells get too small for bars (real models: 28-64 layers x 2-8 heads).
// Click selects a head (headSelected); hover shows the numbers, per modality. Draws the snapshot
// it is given and nothing else.
#pragma once
#include <QWidget>
#include <memory>

#include <vector>

#include "session_types.h"
#include "trimkv/core/kv_stats.h"
#include "trimkv/core/snapshot.h"

class HeadGrid : public QWidget {
  Q_OBJECT

 public:
  enum class Mode { Auto, Bars, Heatmap };

  explicit HeadGrid(QWidget* parent = nullptr);

  // `tokens`: the conversation's positions (their modalities are what "fraction kept" divides
  // by; null: the snapshot's token count, all counted as text).
  void setSnapshot(std::shared_ptr<const trimkv::KvSnapshot> kv,
                   const std::vector<trimkv::vision::StreamToken>* tokens = nullptr);
  void setMode(Mode mode);
  Mode mode() const { return m_mode; }
  bool showsHeatmap() const;  // the mode in effect (Auto resolved at the current size)
  // Fraction of the conversation's positions of `modality` (all of them when null) that cell
  // (layer, head) keeps, in [0, 1]; 0 outside the grid or without positions.
  double keptFraction(int layer, int head, const trimkv::Modality* modality = nullptr) const;
  QString tooltipFor(int layer, int head) const;
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

  void paintBars(QPainter& p, const QRect& cell, const trimkv::ModalityCounts& c, int64_t maxCount) const;
  void paintHeat(QPainter& p, const QRect& cell, int layer, int head) const;

  std::shared_ptr<const trimkv::KvSnapshot> m_kv;
  trimkv::ModalityCounts m_stream;
  Mode m_mode = Mode::Auto;
  int m_selLayer = 0, m_selHead = 0;
};
