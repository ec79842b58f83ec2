// Counts over the entries a KV cache holds, by the modality of their tokens (plain C++).
#pragma once
#include <cstdint>

#include "trimkv/core/kv_types.h"

namespace trimkv {

class KvBookkeeping;

struct ModalityCounts {
  int64_t text = 0, image = 0, special = 0;  // entries (layer x KV head units)

  void add(Modality m, int64_t n = 1) {
    (m == Modality::Text ? text : m == Modality::Image ? image : special) += n;
  }
  int64_t total() const { return text + image + special; }
  ModalityCounts& operator+=(const ModalityCounts& o) {
    text += o.text;
    image += o.image;
    special += o.special;
    return *this;
  }
  bool operator==(const ModalityCounts& o) const {
    return text == o.text && image == o.image && special == o.special;
  }
};

ModalityCounts count_entries_by_modality(const KvBookkeeping& kv);

}  // namespace trimkv
