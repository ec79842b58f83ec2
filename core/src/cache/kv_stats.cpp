#include "trimkv/core/kv_stats.h"

#include "trimkv/core/kv_bookkeeping.h"

namespace trimkv {

ModalityCounts count_entries_by_modality(const KvBookkeeping& kv) {
  ModalityCounts c;
  for (int il = 0; il < kv.geometry().n_layer; ++il)
    for (int h = 0; h < kv.geometry().n_kv_head; ++h)
      for (const EntryMeta& e : kv.entries(il, h)) switch (kv.token(e.token_index).modality) {
          case Modality::Text: ++c.text; break;
          case Modality::Image: ++c.image; break;
          case Modality::Special: ++c.special; break;
        }
  return c;
}

}  // namespace trimkv
