// Multimodal rotary positions of the Qwen-VL line (transformers' Qwen2VLModel.get_rope_index;
// shared/QWEN-VL.md §4): every token gets three positions (time, row, column). A text token
// advances all three together; an image's merged patches take (p, p + row, p + col) from the
// running position p, which then advances by max(rows, cols). The scan runs left to right, so a
// conversation prefilled turn by turn gets the positions of the whole stream computed at once.
// Eviction keeps scoring sequential token positions (METHOD.md §4); these are only for RoPE.
// Groundwork of the Qwen-VL families (issue 16). Plain C++.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace trimkv::vision {

class MropePositions {
 public:
  // `n` text tokens.
  void add_text(int64_t n);
  // One still image whose image_grid_thw is (grid_t, grid_h, grid_w) in patches, merged by
  // `merge` x `merge` into (grid_h / merge) * (grid_w / merge) tokens, row-major. Error{Input}
  // when the grid is not a multiple of the merge or grid_t is not 1 (videos are not supported).
  void add_image(int64_t grid_t, int64_t grid_h, int64_t grid_w, int64_t merge);

  size_t size() const { return m_t.size(); }
  const std::vector<int64_t>& time() const { return m_t; }  // [n]
  const std::vector<int64_t>& row() const { return m_h; }   // [n]
  const std::vector<int64_t>& col() const { return m_w; }   // [n]
  // The position of the next text token (max + 1 so far); a decode step at cache index i uses
  // i + delta() on all three axes.
  int64_t next() const { return m_next; }
  int64_t delta() const { return m_next - static_cast<int64_t>(size()); }

 private:
  std::vector<int64_t> m_t, m_h, m_w;
  int64_t m_next = 0;
};

}  // namespace trimkv::vision
