// The image panel of the inspector: the conversation's last image with the patch grid the model
// saw, and the patches whose KV entries the selected (layer, KV head) keeps: kept patches shown
// clear with an outline, evicted ones darkened. A split image shows its tiles and the global
// view side by side. Geometry from ImageRecord (conversation_types.h), patch identity from the
// snapshot's entries (image id, tile, patch row/col).
#pragma once
#include <QImage>
#include <QHash>
#include <QSet>
#include <QString>
#include <QWidget>
#include <memory>
#include <vector>

#include "session_types.h"

class ImageOverlay : public QWidget {
  Q_OBJECT

 public:
  explicit ImageOverlay(QWidget* parent = nullptr);

  // `tokens`: the conversation's positions (the image's are looked up there, with the snapshot's
  // kept bits and keeper counts, not in every entry of every head).
  void setFrame(const std::vector<trimkv::ImageRecord>& images, std::shared_ptr<const trimkv::KvSnapshot> kv,
                std::shared_ptr<const std::vector<trimkv::vision::StreamToken>> tokens);
  void setHead(int layer, int head);
  // All heads: each patch shaded by how many (layer, KV head) pairs keep it, with the count.
  void setAllHeads(bool all);
  // Kept patches of the shown image for the selected head, as (tile, row, col) keys.
  int keptPatchCount() const { return m_kept.size(); }
  int patchCount() const;  // of the shown image (every tile)
  int gridRows() const;    // visual tokens per tile: rows x columns (any aspect)
  int gridCols() const;
  int nHeadsTotal() const { return m_kv ? static_cast<int>(m_kv->heads.size()) : 0; }
  // All-heads mode: heads keeping patch (tile, row, col) of the shown image.
  int keepersOf(int tile, int row, int col) const { return m_keepers.value(key(tile, row, col), 0); }
  bool hasImage() const { return m_record.image_id >= 0; }

  QSize sizeHint() const override { return {360, 220}; }

 protected:
  void paintEvent(QPaintEvent* event) override;

 private:
  static qint64 key(int tile, int row, int col) { return (qint64(tile) << 32) | (qint64(row) << 16) | qint64(col); }
  void rebuild();
  // Draws `tiles` of the record over `target` (image coordinates: the resized image).
  void drawView(QPainter& p, const QRectF& target, bool global);

  trimkv::ImageRecord m_record;
  QImage m_image;
  QString m_imagePath;
  std::shared_ptr<const trimkv::KvSnapshot> m_kv;
  std::shared_ptr<const std::vector<trimkv::vision::StreamToken>> m_tokens;
  int m_layer = 0, m_head = 0;
  QSet<qint64> m_kept;         // patches the selected head keeps
  QHash<qint64, int> m_keepers;  // all-heads mode: heads keeping each patch
  bool m_all = false;
};
