#include "session_worker.h"

#include <QDir>
#include <QFileInfo>
#include <algorithm>
#include <exception>

#include "conversation_file.h"
#include "display_message.h"
#include "worker_support.h"
#include "trimkv/core/cpu_tuning.h"
#include "trimkv/core/error.h"

using trimkv::vision::ChatEngine;

void registerSessionTypes() {
  qRegisterMetaType<InspectorFrame>("InspectorFrame");
  qRegisterMetaType<ModelSummary>("ModelSummary");
  qRegisterMetaType<TurnStats>("TurnStats");
  qRegisterMetaType<trimkv::EvictionSettings>("trimkv::EvictionSettings");
  qRegisterMetaType<trimkv::GenerationParams>("trimkv::GenerationParams");
  qRegisterMetaType<std::vector<trimkv::Message>>("std::vector<trimkv::Message>");
}

namespace {

// The index in `messages` of its `k`-th user message (0-based), or -1.
int userMessageIndex(const std::vector<trimkv::Message>& messages, int k) {
  for (size_t i = 0; i < messages.size(); ++i)
    if (messages[i].role == "user" && k-- == 0) return static_cast<int>(i);
  return -1;
}

}  // namespace

trimkv::EvictionSettings defaultEviction(const trimkv::ModelInfo& info, int64_t budget) {
  trimkv::EvictionSettings s;
  s.policy = info.gates_file.empty() ? "h2o" : (info.gates_kind.empty() ? "dbtrimkv" : info.gates_kind);
  s.budget_per_head = budget;
  return s;
}

SessionWorker::SessionWorker(QObject* parent) : QObject(parent) { registerSessionTypes(); }

SessionWorker::~SessionWorker() = default;

void SessionWorker::requestStop() { m_cancel.store(true); }

void SessionWorker::setThreads(int threads) {
  m_threads = std::max(threads, 0);
  m_threadsInUse.store(trimkv::set_compute_threads(m_threads));
}

void SessionWorker::setWeights(const QString& weights) { m_weights = weights; }
void SessionWorker::setKvDtype(const QString& kvDtype) { m_kvDtype = kvDtype; }
void SessionWorker::setDevice(const QString& device) { m_device = device; }
void SessionWorker::setImageSize(int imageSize) { m_imageSize = imageSize; }

void SessionWorker::loadModel(const QString& dir, const QString& gates) {
  BusyScope<SessionWorker> busy(this);
  // OpenMP keeps the thread count per thread: this one's must be set here, not in main().
  m_threadsInUse.store(trimkv::set_compute_threads(m_threads));
  m_cancel.store(false);  // a stop from before this load does not apply to it
  Q_EMIT modelLoading(dir);
  std::unique_ptr<ChatEngine> engine;
  try {
    // Loaded aside: on error the current model and conversation stay as they are.
    trimkv::EngineOptions options;
    options.gates = gates.toStdString();
    options.template_vars = m_templateVars;
    options.weights = m_weights.toStdString();
    options.kv_dtype = m_kvDtype.toStdString();
    options.device = m_device.isEmpty() ? std::string("auto") : m_device.toStdString();
    options.image_size = m_imageSize;
    options.cancel = &m_cancel;
    engine = ChatEngine::load(dir.toStdString(), options);
  } catch (const std::exception& e) {
    if (isCancelled(e)) {
      Q_EMIT modelLoadStopped(dir);
      return;
    }
    Q_EMIT errorOccurred(gates.isEmpty() ? tr("Cannot open the model") : tr("Cannot open the model with these gates"),
                         errorText(e));
    return;
  }
  m_engine = std::move(engine);
  m_engine->set_system_prompt(m_systemPrompt.toStdString());
  m_modelDir = dir;
  m_tokens.reset();
  ModelSummary summary;
  summary.dir = dir;
  summary.gates = gates;
  summary.info = m_engine->info();
  summary.vision = m_engine->vision_info();
  summary.chatTemplate = QString::fromStdString(m_engine->chat_template_origin());
  summary.opensThinking = m_engine->answers_open_thinking();
  summary.policies = trimkv::describe_policies();
  summary.imageTokens = m_engine->image_token_counter();
  // Keep the user's eviction choice across models when the new one accepts it.
  if (m_eviction.policy != "full") {
    try {
      m_engine->set_eviction(m_eviction);
    } catch (const std::exception& e) {
      Q_EMIT errorOccurred(tr("The eviction settings do not fit this model"),
                           errorText(e) + tr("\nThe model runs with the full cache."));
      m_eviction = trimkv::EvictionSettings{};
    }
  }
  Q_EMIT modelLoaded(summary);
  if (const std::string problem = m_engine->chat_template_problem(); !problem.empty())
    Q_EMIT errorOccurred(tr("This model cannot chat"), QString::fromStdString(problem));
  Q_EMIT evictionApplied(m_eviction);
  emitFrame(QStringLiteral("idle"), 0, true);
}

void SessionWorker::setEviction(const trimkv::EvictionSettings& settings) {
  if (!m_engine) {
    m_eviction = settings;  // applied when a model loads
    Q_EMIT evictionApplied(settings);
    return;
  }
  try {
    m_engine->set_eviction(settings);  // checked against the model; nothing changes on error
  } catch (const std::exception& e) {
    Q_EMIT errorOccurred(tr("Cannot use these eviction settings"), errorText(e));
    Q_EMIT evictionApplied(m_eviction);  // lets the GUI show what is still in force
    return;
  }
  m_eviction = settings;
  Q_EMIT evictionApplied(settings);
}

void SessionWorker::provideTranscript() {
  Q_EMIT transcriptProvided(m_engine ? m_engine->transcript() : std::vector<trimkv::Message>{});
}

void SessionWorker::setGenerationParams(const trimkv::GenerationParams& params) { m_params = params; }

void SessionWorker::setSystemPrompt(const QString& text) {
  m_systemPrompt = text;
  if (m_engine) m_engine->set_system_prompt(text.toStdString());
}

void SessionWorker::setTemplateVariables(const QStringList& lines) {
  BusyScope<SessionWorker> busy(this);
  std::vector<trimkv::TemplateVar> vars;
  try {
    for (const QString& line : lines)
      if (!line.trimmed().isEmpty()) vars.push_back(trimkv::parse_template_var(line.trimmed().toStdString()));
    if (m_engine) m_engine->set_template_variables(vars);  // starts a new conversation
  } catch (const std::exception& e) {
    Q_EMIT errorOccurred(tr("Cannot use these template variables"), errorText(e));
    return;
  }
  m_templateVars = vars;
  if (!m_engine) return;
  m_tokens.reset();
  Q_EMIT conversationReset();
  emitFrame(QStringLiteral("idle"), 0, true);
}

void SessionWorker::setAutosaveFile(const QString& path) {
  m_autosaveFile = path;
  m_autosaveFailed = false;
}

void SessionWorker::autosave() {
  if (m_autosaveFile.isEmpty() || !m_engine || m_engine->transcript().empty()) return;
  try {
    QDir().mkpath(QFileInfo(m_autosaveFile).absolutePath());
    saveConversationFile(m_autosaveFile, m_engine->transcript(), m_modelDir);
  } catch (const std::exception& e) {
    if (!m_autosaveFailed)
      Q_EMIT errorOccurred(tr("Cannot autosave the conversation"),
                           errorText(e) + tr("\nThe conversation goes on; it is not saved until this is fixed."));
    m_autosaveFailed = true;
    return;
  }
  m_autosaveFailed = false;
  Q_EMIT autosaved(m_autosaveFile);
}

void SessionWorker::finishTurn(const TurnStats& stats) {
  autosave();
  Q_EMIT turnFinished(stats);
}

void SessionWorker::settleSystemPrompt() {
  if (m_engine) m_engine->set_system_prompt(m_systemPrompt.toStdString());
}

void SessionWorker::reset() {
  if (!m_engine) return;
  BusyScope<SessionWorker> busy(this);
  try {
    m_engine->reset();
  } catch (const std::exception& e) {  // nothing may escape a slot into the event loop
    Q_EMIT errorOccurred(tr("Cannot start a new conversation"), errorText(e));
    return;
  }
  m_tokens.reset();
  Q_EMIT conversationReset();
  emitFrame(QStringLiteral("idle"), 0, true);
}

void SessionWorker::sendTurn(const QString& text, const QStringList& images) {
  BusyScope<SessionWorker> busy(this);
  if (!beginRequest()) {
    Q_EMIT errorOccurred(tr("Cannot send the message"), tr("No model is loaded: open a model folder first."));
    return;
  }
  QElapsedTimer clock;
  clock.start();
  std::vector<std::string> paths;
  for (const QString& p : images) paths.push_back(p.toStdString());
  const Checkpoint before = m_engine->checkpoint();

  try {
    m_engine->add_user_turn(text.toStdString(), paths, &m_cancel);
  } catch (const std::exception& e) {
    // The engine rolled back: the conversation is as before the request.
    reportTurnFailure(e, tr("Stopped before the answer started."), tr("Cannot add the message"), false);
    return;
  }
  answerPending(clock, before);
}

bool SessionWorker::beginRequest() {
  if (!m_engine) {
    Q_EMIT turnFailed(tr("No model is loaded."));
    return false;
  }
  armRequest();
  return true;
}

void SessionWorker::armRequest() {
  m_cancel.store(false);  // a stop from before this request does not apply to it
  m_frameBefore = m_lastFrame;
}

void SessionWorker::regenerate() {
  BusyScope<SessionWorker> busy(this);
  if (!beginRequest()) return;
  QElapsedTimer clock;
  clock.start();
  const Checkpoint before = m_engine->checkpoint();
  std::vector<trimkv::Message> history = m_engine->transcript();
  if (!history.empty() && history.back().role == "assistant") history.pop_back();
  if (history.empty() || history.back().role != "user") {
    Q_EMIT turnFailed(tr("There is no question to answer again."));
    return;
  }
  try {
    replay(history);
  } catch (const std::exception& e) {
    restore(before);
    if (!isCancelled(e)) Q_EMIT errorOccurred(tr("Cannot replay the conversation"), errorText(e));
    Q_EMIT turnFailed(errorText(e));
    emitFrame(QStringLiteral("idle"), 0, true);
    return;
  }
  settleSystemPrompt();
  answerPending(clock, before);
}

void SessionWorker::resendFrom(int userTurn, const QString& text, const QStringList& images) {
  BusyScope<SessionWorker> busy(this);
  if (!beginRequest()) return;
  QElapsedTimer clock;
  clock.start();
  const Checkpoint before = m_engine->checkpoint();
  const std::vector<trimkv::Message> messages = m_engine->transcript();
  const int cut = userMessageIndex(messages, userTurn);
  if (cut < 0) {
    Q_EMIT turnFailed(tr("The conversation has no message %1 to edit.").arg(userTurn + 1));
    return;
  }
  std::vector<std::string> paths;
  for (const QString& p : images) paths.push_back(p.toStdString());
  try {
    // Earlier turns as they were (a system message stays the engine's system prompt until the
    // edited turn, if it is the first, brings it in).
    replay(std::vector<trimkv::Message>(messages.begin(), messages.begin() + cut));
    m_engine->add_user_turn(text.toStdString(), paths, &m_cancel);
  } catch (const std::exception& e) {
    restore(before);
    reportTurnFailure(e, tr("Stopped before the answer started."), tr("Cannot send the edited message"), true);
    return;
  }
  settleSystemPrompt();
  answerPending(clock, before);
}

void SessionWorker::replayConversation() {
  BusyScope<SessionWorker> busy(this);
  if (!beginRequest()) return;
  const Checkpoint before = m_engine->checkpoint();
  std::vector<trimkv::Message> system, users;
  for (const trimkv::Message& m : m_engine->transcript()) {
    if (m.role == "system") system.push_back(m);
    else if (m.role == "user") users.push_back(m);
  }
  if (users.empty()) {
    Q_EMIT turnFailed(tr("There is nothing to replay: the conversation is empty."));
    return;
  }
  Q_EMIT replayStarted(system.empty() ? QString() : displayMessage(system.front()).text);
  for (size_t i = 0; i < users.size(); ++i) {
    QElapsedTimer clock;
    clock.start();
    const DisplayMessage shown = displayMessage(users[i]);
    Q_EMIT userTurnStarted(shown.text, shown.images);
    try {
      if (i == 0) replay(system);  // empty, under the current settings, with its system message
      m_engine->add_user_turn(users[i].content, &m_cancel);
    } catch (const std::exception& e) {
      restore(before);
      reportTurnFailure(e, tr("Replay stopped; the conversation is as before."), tr("Cannot replay the conversation"),
                        true);
      return;
    }
    settleSystemPrompt();
    const std::optional<TurnStats> stats = generateAnswer(clock, before);
    if (!stats) return;  // reported; the conversation is as before
    const bool last = i + 1 == users.size() || stats->stopReason == QLatin1String("cancelled");
    if (last) {
      finishTurn(*stats);
      return;
    }
    Q_EMIT answerReplayed(*stats);
  }
}

void SessionWorker::saveConversation(const QString& path) {
  if (!m_engine) return;
  try {
    saveConversationFile(path, m_engine->transcript(), m_modelDir);
  } catch (const std::exception& e) {
    Q_EMIT errorOccurred(tr("Cannot save the conversation"), errorText(e));
    return;
  }
  Q_EMIT conversationSaved(path);
}

void SessionWorker::loadConversation(const QString& path) {
  BusyScope<SessionWorker> busy(this);
  if (!m_engine) {
    Q_EMIT errorOccurred(tr("Cannot open the conversation"), tr("No model is loaded: open a model folder first."));
    return;
  }
  std::vector<trimkv::Message> messages;
  try {
    messages = loadConversationFile(path);
  } catch (const std::exception& e) {
    Q_EMIT errorOccurred(tr("Cannot open the conversation"), errorText(e));
    return;
  }
  const Checkpoint before = m_engine->checkpoint();
  armRequest();
  try {
    replay(messages);  // images re-encoded, answers as given, under the current settings
  } catch (const std::exception& e) {
    restore(before);
    if (!isCancelled(e)) Q_EMIT errorOccurred(tr("Cannot open the conversation"), errorText(e));
    emitFrame(QStringLiteral("idle"), 0, true);
    return;
  }
  settleSystemPrompt();
  Q_EMIT conversationLoaded(m_engine->transcript());
  emitFrame(QStringLiteral("idle"), 0, true);
}

void SessionWorker::replay(const std::vector<trimkv::Message>& messages) {
  std::string system;
  for (const trimkv::Message& m : messages)
    if (m.role == "system")
      for (const trimkv::ContentPart& p : m.content) system += p.text;
  m_engine->set_system_prompt(system);  // the conversation's own, not the next one's
  m_engine->reset();  // a fresh evictor too: the replay runs under the current settings
  m_tokens.reset();
  for (const trimkv::Message& m : messages) {
    if (m.role == "user") {
      m_engine->add_user_turn(m.content, &m_cancel);
    } else if (m.role == "assistant") {
      std::string text;
      for (const trimkv::ContentPart& p : m.content)
        if (p.kind == trimkv::ContentPart::Kind::Text) text += p.text;
      m_engine->add_assistant_text(text, &m_cancel);
    }
  }
}

void SessionWorker::restore(const Checkpoint& before) {
  m_engine->restore(*before);
  settleSystemPrompt();
  m_tokens.reset();
}

void SessionWorker::answerPending(const QElapsedTimer& clock, const Checkpoint& before) {
  if (const std::optional<TurnStats> stats = generateAnswer(clock, before)) finishTurn(*stats);
}

std::optional<TurnStats> SessionWorker::generateAnswer(const QElapsedTimer& clock, const Checkpoint& before) {
  const int64_t promptTokens = m_engine->state().tokens;
  emitFrame(QStringLiteral("prefill"), 0, false);

  m_pendingText.clear();
  m_textClock.start();
  m_frameClock.start();
  const double respondStartMs = static_cast<double>(clock.nsecsElapsed()) / 1e6;
  auto onText = [&](const std::string& piece) {
    m_pendingText += QString::fromStdString(piece);
    if (m_textClock.elapsed() >= kMinEmitIntervalMs) flushText();
    // The callback runs between decode steps: the cache is consistent and may be read.
    if (m_frameClock.elapsed() >= kMinEmitIntervalMs) {
      emitFrame(QStringLiteral("decode"), m_engine->state().tokens - promptTokens, false);
      m_frameClock.restart();
    }
  };

  trimkv::GenerationResult result;
  try {
    result = m_engine->respond(m_params, onText, &m_cancel);
  } catch (const std::exception& e) {
    // The engine is back to "awaiting an answer"; the GUI drops the turn, so the conversation
    // goes back to what it was before the request.
    m_pendingText.clear();
    restore(before);
    reportTurnFailure(e, tr("Stopped."), tr("The answer failed"), true);
    return std::nullopt;
  }
  flushText();

  TurnStats stats;
  stats.text = QString::fromStdString(result.text);
  stats.stopReason = QString::fromStdString(result.stop_reason);
  stats.promptTokens = promptTokens;
  stats.generatedTokens = static_cast<int64_t>(result.tokens.size());
  // Wall time from the request to the first sampled token (not to the first printable text: a
  // token may decode to nothing shown yet); the prompt's prefill happened before respond().
  stats.timeToFirstTokenMs = respondStartMs + std::max(result.first_token_ms, 0.0);
  if (stats.generatedTokens > 1 && result.decode_ms > 0)
    stats.tokensPerSecond = static_cast<double>(stats.generatedTokens - 1) / (result.decode_ms / 1000.0);
  emitFrame(QStringLiteral("idle"), stats.generatedTokens, true);
  return stats;
}

void SessionWorker::flushText() {
  if (!m_pendingText.isEmpty()) {
    Q_EMIT textChunk(m_pendingText);
    m_pendingText.clear();
  }
  m_textClock.restart();
}

void SessionWorker::refreshTokens(int64_t n_tokens, bool full) {
  const size_t have = m_tokens ? m_tokens->size() : 0;
  if (!full && have == static_cast<size_t>(n_tokens)) return;
  auto tokens = std::make_shared<std::vector<trimkv::vision::StreamToken>>();
  if (full || !m_tokens || have > static_cast<size_t>(n_tokens)) {
    *tokens = m_engine->tokens(0);
  } else {
    tokens->reserve(static_cast<size_t>(n_tokens));
    *tokens = *m_tokens;
    std::vector<trimkv::vision::StreamToken> more = m_engine->tokens(static_cast<int64_t>(have));
    tokens->insert(tokens->end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
  }
  m_tokens = std::move(tokens);
}

void SessionWorker::reportTurnFailure(const std::exception& e, const QString& stopped, const QString& title,
                                      bool withTrace) {
  if (isCancelled(e)) {
    Q_EMIT turnFailed(stopped);
  } else {
    Q_EMIT turnFailed(errorText(e));
    Q_EMIT errorOccurred(title, errorText(e));
  }
  emitFrame(QStringLiteral("idle"), 0, withTrace);
}

void SessionWorker::emitFrame(const QString& phase, int64_t generated, bool withTrace) {
  if (!m_engine) return;
  if (!m_engine->cache_current()) {
    m_lastFrame = m_frameBefore;
    if (m_lastFrame.kv) Q_EMIT frameReady(m_lastFrame);
    return;
  }
  InspectorFrame frame;
  std::shared_ptr<trimkv::KvSnapshot> kv;
  try {
    frame.state = m_engine->state();
    kv = std::make_shared<trimkv::KvSnapshot>(m_engine->snapshot());
    if (withTrace) frame.trace = std::make_shared<const trimkv::Trace>(m_engine->trace());
  } catch (const std::exception& e) {  // a bug in the engine's views: say so, keep running
    Q_EMIT errorOccurred(tr("Cannot read the KV cache"), errorText(e));
    return;
  }
  try {
    refreshTokens(kv->n_tokens, phase != QLatin1String("decode"));
  } catch (const std::exception& e) {
    Q_EMIT errorOccurred(tr("Cannot read the token stream"), errorText(e));
    return;
  }
  frame.kv = std::move(kv);
  frame.tokens = m_tokens;
  frame.phase = phase;
  frame.generatedTokens = generated;
  m_lastFrame = frame;
  Q_EMIT frameReady(frame);
}
