// The inspector's past: a bounded ring of frames the scrubber can go back to. A frame is kept
// when the cache changed shape since the last kept one (a new eviction event) or when it ends a
// turn (phase idle), so the ring holds about one frame per eviction event. Frames share their
// snapshots with the views (shared_ptr<const>), so keeping one costs no copy; the ring holds at
// most kMaxFrames frames and about kMaxBytes of snapshot data, dropping the oldest first.
#pragma once
#include <cstdint>
#include <deque>

#include "session_types.h"

class FrameHistory {
 public:
  static constexpr int kMaxFrames = 256;
  static constexpr int64_t kMaxBytes = int64_t{256} << 20;

  // Keeps `frame` if it is worth a scrubber stop (see above); true when it was kept. A frame
  // whose step is below the last kept one starts a new history (the conversation was reset,
  // replayed or rolled back: the old steps no longer lead to it).
  bool add(const InspectorFrame& frame);
  void clear();

  int size() const { return static_cast<int>(m_frames.size()); }
  bool empty() const { return m_frames.empty(); }
  const InspectorFrame& at(int i) const { return m_frames[static_cast<size_t>(i)]; }
  const InspectorFrame& back() const { return m_frames.back(); }
  int64_t bytes() const { return m_bytes; }
  // Bytes a frame accounts for: its snapshot's entries and kept-bit words, and its token list.
  static int64_t bytesOf(const InspectorFrame& frame);

 private:
  std::deque<InspectorFrame> m_frames;
  int64_t m_bytes = 0;
};
