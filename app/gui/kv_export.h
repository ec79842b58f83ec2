// Data exports of the inspector: the eviction trace as JSON (core's trimkv-trace schema,
// trace.h) and the per-head kept counts of a snapshot as CSV, one row per (layer, KV head):
//   layer,kv_head,text,image,special,total
// Both written atomically (atomic_file.h); Error{Io} naming the file.
#pragma once
#include <QByteArray>
#include <QString>

#include "trimkv/core/snapshot.h"
#include "trimkv/core/trace.h"

QByteArray perHeadCountsCsv(const trimkv::KvSnapshot& kv);
void exportHeadCounts(const trimkv::KvSnapshot& kv, const QString& path);
void exportTrace(const trimkv::Trace& trace, const QString& path);
