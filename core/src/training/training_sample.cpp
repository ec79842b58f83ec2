// TrainingSample's layout helpers (gate_training.h): truncation and the decoder inputs besides
// the embeddings.
#include <ATen/ATen.h>

#include "trimkv/core/error.h"
#include "trimkv/core/gate_training.h"
#include "trimkv/core/layers.h"

namespace trimkv {

void TrainingSample::drop_front(int64_t k) {
  const int64_t n = static_cast<int64_t>(ids.size());
  TRIMKV_ASSERT(k >= 0 && k <= n && static_cast<int64_t>(is_label.size()) == n);
  if (k == 0) return;
  ids.erase(ids.begin(), ids.begin() + k);
  is_label.erase(is_label.begin(), is_label.begin() + k);
  if (!rope.empty()) {
    TRIMKV_ASSERT(static_cast<int64_t>(rope.size()) == n);
    rope.erase(rope.begin(), rope.begin() + k);
  }
  if (!is_media.empty()) {
    TRIMKV_ASSERT(static_cast<int64_t>(is_media.size()) == n);
    int64_t dropped_rows = 0;
    for (int64_t i = 0; i < k; ++i) dropped_rows += is_media[i] ? 1 : 0;
    is_media.erase(is_media.begin(), is_media.begin() + k);
    if (media.defined()) media = media.slice(0, dropped_rows).clone();
    for (at::Tensor& d : deepstack) d = d.slice(0, dropped_rows).clone();
  }
}

at::Tensor TrainingSample::rotary_positions() const {
  const int64_t n = static_cast<int64_t>(ids.size());
  if (rope.empty()) return at::arange(n, at::kLong);
  TRIMKV_ASSERT(static_cast<int64_t>(rope.size()) == n, "sample of line ", line, ": ", rope.size(),
                " rotary positions for ", n, " tokens");
  return rotary_position_tensor(rope, true);
}

LayerInjection TrainingSample::injection() const {
  LayerInjection inject;
  if (deepstack.empty()) return inject;
  std::vector<int64_t> rows;
  for (size_t i = 0; i < is_media.size(); ++i)
    if (is_media[i]) rows.push_back(static_cast<int64_t>(i));
  for (const at::Tensor& d : deepstack)
    TRIMKV_ASSERT(d.dim() == 2 && d.size(0) == static_cast<int64_t>(rows.size()), "sample of line ", line,
                  ": deepstack rows do not match its media positions");
  if (rows.empty()) return inject;  // truncation dropped every media position
  inject.rows = at::tensor(rows, at::kLong);
  inject.adds = deepstack;
  return inject;
}

}  // namespace trimkv
