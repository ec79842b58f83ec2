// The one object that owns the vision::ChatEngine (STYLE.md §12, §13). It lives on its own
// QThread; the GUI talks to it only through queued slot calls and receives immutable values
// (session_types.h) through its signals. The GUI thread never calls the engine.
//
// Contract of the signals of one request:
//   loadModel  -> modelLoaded + frameReady, or errorOccurred, or modelLoadStopped after a stop
//                 (requestStop; the previous model stays loaded either way)
//   sendTurn   -> frameReady (after the prefill), textChunk* and frameReady* while decoding,
//                 then exactly one of turnFinished (answer complete or stopped) or turnFailed
//                 (nothing of the turn was kept: the conversation is as before the request)
//   regenerate -> as sendTurn (the last answer is replaced)
//   resendFrom -> as sendTurn (the conversation is cut before the edited user turn first)
//   replayConversation -> replayStarted, then per user turn userTurnStarted, textChunk*,
//                 frameReady*, and answerReplayed (every turn but the last) or, for the last
//                 (or a stopped) one, turnFinished; or turnFailed (conversation restored)
//   provideTranscript -> transcriptProvided (empty without a model)
//   setEviction -> evictionApplied, or errorOccurred (the previous settings stay)
//   reset      -> conversationReset + frameReady
//   saveConversation -> conversationSaved, or errorOccurred
//   loadConversation -> conversationLoaded + frameReady, or errorOccurred (conversation kept)
// With an autosave file set, every completed turn (turnFinished) is first written there
// (conversation_file.h: images beside it, the JSON replaced atomically) and autosaved emitted,
// so a crash loses at most the turn in flight.
// busyChanged(true/false) brackets every request.
#pragma once
#include <QElapsedTimer>
#include <QObject>
#include <QString>
#include <QStringList>
#include <atomic>
#include <exception>
#include <memory>
#include <optional>
#include <vector>

#include "session_types.h"

class SessionWorker : public QObject {
  Q_OBJECT

 public:
  // At most this many textChunk and frameReady emits per second each (coalesced in between).
  static constexpr int kMinEmitIntervalMs = 50;

  explicit SessionWorker(QObject* parent = nullptr);
  ~SessionWorker() override;

  // Thread-safe, callable from any thread (not through the event loop, which is blocked while a
  // turn runs): the turn in flight stops at its next token. A stop before a request has no effect
  // on later requests.
  void requestStop();
  // Threads the model's math uses on the worker thread (set there by setThreads / loadModel).
  int threadsInUse() const { return m_threadsInUse.load(); }

 public Q_SLOTS:
  // gates: "" = the folder's own retention gates (if any), "none", or a gates file
  // (.safetensors ours, .pth the reference's), checked against the model.
  void loadModel(const QString& dir, const QString& gates = QString());
  // `text` may hold <image> placeholders; images without placeholders go first.
  void sendTurn(const QString& text, const QStringList& images);
  // Answers the last question again under the current settings: the conversation is rebuilt from
  // its transcript (user turns re-encoded, earlier answers as given) without the last answer,
  // then a new answer is generated. Signals as sendTurn; on failure the conversation is restored.
  void regenerate();
  // Cuts the conversation before its `userTurn`-th user message (0-based), then sends (text,
  // images) in its place: earlier turns are replayed (answers as given) under the current
  // settings. On failure the conversation is restored.
  void resendFrom(int userTurn, const QString& text, const QStringList& images);
  // Re-runs the whole conversation under the current settings: reset, then every user turn sent
  // again and answered anew. A stop during an answer ends the replay there (that answer is kept
  // as far as it got, later turns are dropped); a stop while a question is read in, or an error,
  // restores the conversation as it was.
  void replayConversation();
  // The system message of the next fresh conversation (ChatEngine::set_system_prompt).
  void setSystemPrompt(const QString& text);
  // Chat-template variables ("name=value" lines, e.g. enable_thinking=false) for this and every
  // later model: the conversation starts anew (conversationReset), or errorOccurred names a bad line.
  void setTemplateVariables(const QStringList& lines);
  // Where completed turns are saved ("" = nowhere, the default).
  void setAutosaveFile(const QString& path);
  void reset();
  // Writes the transcript and copies its images beside it (conversation_file.h).
  void saveConversation(const QString& path);
  // Replaces the conversation by a saved one, replayed under the current settings; on error the
  // conversation stays as it was.
  void loadConversation(const QString& path);
  void setEviction(const trimkv::EvictionSettings& settings);
  // Emits transcriptProvided with the conversation as it stands (after the requests before it).
  void provideTranscript();
  void setGenerationParams(const trimkv::GenerationParams& params);
  // CPU threads for the model's math (0 = every core, the default), set on the worker thread.
  void setThreads(int threads);
  // How the next model loaded holds its weights ("" = the checkpoint's own bf16/f16, else f32;
  // f32, bf16, f16, q8, q4).
  void setWeights(const QString& weights);
  void setKvDtype(const QString& kvDtype);
  // Where the next model loaded runs ("" = auto, cpu, cuda; compute_device.h).
  void setDevice(const QString& device);
  void setImageSize(int imageSize);

 Q_SIGNALS:
  void busyChanged(bool busy);
  void modelLoading(const QString& dir);
  void modelLoaded(const ModelSummary& model);
  void modelLoadStopped(const QString& dir);
  void textChunk(const QString& chunk);
  void frameReady(const InspectorFrame& frame);
  void turnFinished(const TurnStats& stats);
  void turnFailed(const QString& message);
  void evictionApplied(const trimkv::EvictionSettings& settings);
  void conversationReset();
  // Replay: the conversation's system message ("" = none) and then each user turn as it is sent.
  void replayStarted(const QString& systemText);
  void userTurnStarted(const QString& text, const QStringList& images);
  void answerReplayed(const TurnStats& stats);
  void conversationSaved(const QString& path);
  void conversationLoaded(const std::vector<trimkv::Message>& messages);
  void autosaved(const QString& path);
  void transcriptProvided(const std::vector<trimkv::Message>& messages);
  // A problem the user must see: `title` says what failed ("Cannot open the model"), `message`
  // is the library's error text naming the folder, file, field or setting.
  void errorOccurred(const QString& title, const QString& message);

 private:
  using Checkpoint = std::shared_ptr<const trimkv::vision::ConversationCheckpoint>;
  // The start of every conversation request: false (turnFailed emitted) when no model is loaded;
  // otherwise armRequest().
  bool beginRequest();
  // Clears a stop left from before and keeps the frame shown (m_frameBefore).
  void armRequest();
  // Builds and emits a frame of the engine's current state (the worker thread only). While the
  // engine's cache is still to be rebuilt after a restore, m_frameBefore is shown again instead:
  // the conversation is what it was when that frame was taken.
  void emitFrame(const QString& phase, int64_t generated, bool withTrace);
  // A failed turn: turnFailed (with `stopped` when it was cancelled, else the error, which also
  // goes to errorOccurred under `title`), then an idle frame.
  void reportTurnFailure(const std::exception& e, const QString& stopped, const QString& title, bool withTrace);
  void flushText();
  // Generates the answer to the pending user turn, streaming it (textChunk, frameReady), and
  // returns its stats; on failure the conversation is restored to `before`, the failure reported
  // (turnFailed) and nothing returned.
  std::optional<TurnStats> generateAnswer(const QElapsedTimer& clock, const Checkpoint& before);
  // generateAnswer, then turnFinished.
  void answerPending(const QElapsedTimer& clock, const Checkpoint& before);
  // Resets the engine and re-adds `messages` (throws what the engine throws). A system message
  // becomes the engine's system prompt, so it stays in force until the first user turn is in;
  // every request that replays ends with settleSystemPrompt().
  void replay(const std::vector<trimkv::Message>& messages);
  // Puts the user's system prompt (m_systemPrompt) back for the next fresh conversation.
  void settleSystemPrompt();
  // Saves the conversation to the autosave file (if set and the conversation is not empty); a
  // failure is reported once per file, not after every turn.
  void autosave();
  // autosave(), then turnFinished.
  void finishTurn(const TurnStats& stats);
  // The conversation as it was at `before`, at once (ChatEngine::restore: nothing is prefilled
  // now; the next request rebuilds the cache first, under its own stop), then settleSystemPrompt().
  void restore(const Checkpoint& before);
  // m_tokens for a stream of n_tokens positions: read again in full at turn boundaries (`full`:
  // a replay or rollback may have changed earlier positions), else only the new ones.
  void refreshTokens(int64_t n_tokens, bool full);

  std::unique_ptr<trimkv::vision::ChatEngine> m_engine;
  QString m_modelDir;
  trimkv::EvictionSettings m_eviction;  // what the engine runs under (policy "full" = none)
  trimkv::GenerationParams m_params;
  QString m_systemPrompt;  // for the next fresh conversation
  std::vector<trimkv::TemplateVar> m_templateVars;  // given to every model loaded
  QString m_autosaveFile;
  bool m_autosaveFailed = false;  // reported already
  std::atomic<bool> m_cancel{false};
  int m_threads = 0;                    // the setting (0 = every core)
  QString m_weights;                    // weight precision for loads ("" = the checkpoint's)
  QString m_kvDtype;                    // KV cache dtype for loads ("" = the checkpoint's default)
  QString m_device;                     // device for loads ("" = auto)
  int m_imageSize = 0;                  // image resolution for loads (0 = the processor's own)
  std::atomic<int> m_threadsInUse{0};   // what the worker thread uses
  // The stream's positions as last read (ChatEngine::tokens), shared with the frames sent.
  std::shared_ptr<const std::vector<trimkv::vision::StreamToken>> m_tokens;
  InspectorFrame m_lastFrame;    // the last frame emitted
  InspectorFrame m_frameBefore;  // m_lastFrame when the request in flight began

  // Coalescing of the turn in flight (worker thread only).
  QString m_pendingText;
  QElapsedTimer m_textClock, m_frameClock;
};

// The policy a fresh window starts with for a model: the model's gate policy when it has gates,
// else "h2o" (needs no gates and takes any budget, unlike the SnapKV family whose window must
// fit in it); budget per head `budget`.
trimkv::EvictionSettings defaultEviction(const trimkv::ModelInfo& info, int64_t budget);
