#include "trimkv/vision/mrope.h"

#include <algorithm>

#include "trimkv/core/error.h"

namespace trimkv::vision {

void MropePositions::add_text(int64_t n) {
  TRIMKV_CHECK(n >= 0, Input, "a text run of ", n, " tokens");
  for (int64_t i = 0; i < n; ++i) {
    m_t.push_back(m_next + i);
    m_h.push_back(m_next + i);
    m_w.push_back(m_next + i);
  }
  m_next += n;
}

void MropePositions::add_image(int64_t grid_t, int64_t grid_h, int64_t grid_w, int64_t merge) {
  TRIMKV_CHECK(merge > 0 && grid_h > 0 && grid_w > 0 && grid_h % merge == 0 && grid_w % merge == 0, Input,
               "image grid ", grid_h, "x", grid_w, " is not a multiple of the spatial merge ", merge);
  TRIMKV_CHECK(grid_t == 1, Unsupported, "image grid with ", grid_t, " temporal patches (videos are not supported)");
  const int64_t rows = grid_h / merge, cols = grid_w / merge;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      m_t.push_back(m_next);
      m_h.push_back(m_next + r);
      m_w.push_back(m_next + c);
    }
  m_next += std::max(rows, cols);
}

}  // namespace trimkv::vision
