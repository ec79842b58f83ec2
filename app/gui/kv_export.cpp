#include "kv_export.h"

#include "atomic_file.h"

QByteArray perHeadCountsCsv(const trimkv::KvSnapshot& kv) {
  QByteArray csv("layer,kv_head,text,image,special,total\n");
  for (int il = 0; il < kv.geometry.n_layer; ++il)
    for (int h = 0; h < kv.geometry.n_kv_head; ++h) {
      const trimkv::ModalityCounts& c = kv.head(il, h).counts;
      csv += QByteArray::number(il) + ',' + QByteArray::number(h) + ',' + QByteArray::number(c.text) + ',' +
             QByteArray::number(c.image) + ',' + QByteArray::number(c.special) + ',' +
             QByteArray::number(c.total()) + '\n';
    }
  return csv;
}

void exportHeadCounts(const trimkv::KvSnapshot& kv, const QString& path) { writeFileAtomically(path, perHeadCountsCsv(kv)); }

void exportTrace(const trimkv::Trace& trace, const QString& path) {
  writeFileAtomically(path, QByteArray::fromStdString(trimkv::trace_to_json(trace, 2)) + '\n');
}
