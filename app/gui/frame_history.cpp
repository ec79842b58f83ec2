#include "frame_history.h"

int64_t FrameHistory::bytesOf(const InspectorFrame& frame) {
  if (!frame.kv) return 0;
  int64_t bytes = static_cast<int64_t>(sizeof(trimkv::KvSnapshot));
  for (const trimkv::HeadSnapshot& h : frame.kv->heads)
    bytes += static_cast<int64_t>(h.entries.size() * sizeof(trimkv::SnapshotEntry) + h.kept_bits.size() * sizeof(uint64_t) +
                                  sizeof(trimkv::HeadSnapshot));
  // Its token list too (frames often share one; counting it for each keeps the bound safe).
  if (frame.tokens) bytes += static_cast<int64_t>(frame.tokens->size() * sizeof(trimkv::vision::StreamToken));
  return bytes;
}

bool FrameHistory::add(const InspectorFrame& frame) {
  if (!frame.kv) return false;
  if (!m_frames.empty() && frame.kv->step < m_frames.back().kv->step) clear();
  const bool endsTurn = frame.phase == QLatin1String("idle");
  if (!m_frames.empty()) {
    InspectorFrame& last = m_frames.back();
    if (frame.kv->step == last.kv->step) {
      // The same moment again: the turn's end replaces it (it carries the trace), else skip.
      if (!endsTurn) return false;
      m_bytes += bytesOf(frame) - bytesOf(last);
      last = frame;
      return true;
    }
    if (frame.state.eviction_events == last.state.eviction_events && !endsTurn) return false;
  }
  m_frames.push_back(frame);
  m_bytes += bytesOf(frame);
  while (m_frames.size() > 1 &&
         (static_cast<int>(m_frames.size()) > kMaxFrames || m_bytes > kMaxBytes)) {
    m_bytes -= bytesOf(m_frames.front());
    m_frames.pop_front();
  }
  return true;
}

void FrameHistory::clear() {
  m_frames.clear();
  m_bytes = 0;
}
