// Immutable value types the SessionWorker sends to the GUI thread over queued connections
// (STYLE.md §12). Everything large is held by shared_ptr<const T>: a frame is copied by the
// signal machinery, its payload never is, and no one can change it after it was emitted.
#pragma once
#include <QMetaType>
#include <QString>
#include <QStringList>
#include <cstdint>
#include <memory>
#include <functional>
#include <vector>

#include "trimkv/core/engine.h"
#include "trimkv/core/snapshot.h"
#include "trimkv/core/trace.h"
#include "trimkv/vision/chat_engine.h"
#include "trimkv/vision/vlm_info.h"

// What the inspector draws at one moment of the conversation.
struct InspectorFrame {
  trimkv::vision::ConversationState state;
  std::shared_ptr<const trimkv::KvSnapshot> kv;       // never null in an emitted frame
  // [kv->n_tokens]: every position, kept or evicted (ChatEngine::tokens); the answer in flight
  // has no ids or text until its turn ends.
  std::shared_ptr<const std::vector<trimkv::vision::StreamToken>> tokens;
  std::shared_ptr<const trimkv::Trace> trace;         // end of a turn only (else null)
  QString phase;                                      // "prefill" | "decode" | "idle"
  int64_t generatedTokens = 0;                        // of the turn in flight
};

// The loaded model, as the toolbar and the status bar show it.
struct ModelSummary {
  QString dir;
  QString gates;  // how it was loaded: "" the folder's own gates, "none", or a gates file
  trimkv::ModelInfo info;
  trimkv::vision::VisionInfo vision;
  QString chatTemplate;  // the file the chat template came from ("" when the folder has none)
  bool opensThinking = false;  // answers start inside a <think> block (ChatEngine::answers_open_thinking)
  std::vector<trimkv::PolicyDescription> policies;  // every policy of the eviction engine
  // Image tokens an image of width x height becomes at the loaded resolution (any thread).
  std::function<int64_t(int, int)> imageTokens;
};

// Timings and sizes of one finished (or stopped) answer.
struct TurnStats {
  QString text;        // the whole answer
  QString stopReason;  // eos | stop_string | max_tokens | context_full | cancelled
  int64_t promptTokens = 0;
  int64_t generatedTokens = 0;
  double timeToFirstTokenMs = 0;  // from the request (image encoding + prefill) to the first text
  double tokensPerSecond = 0;     // decode steps after the first token
};

Q_DECLARE_METATYPE(InspectorFrame)
Q_DECLARE_METATYPE(ModelSummary)
Q_DECLARE_METATYPE(TurnStats)
Q_DECLARE_METATYPE(trimkv::EvictionSettings)
Q_DECLARE_METATYPE(trimkv::GenerationParams)
Q_DECLARE_METATYPE(std::vector<trimkv::Message>)

// Registers the types above for queued connections (idempotent; call before connecting).
void registerSessionTypes();
