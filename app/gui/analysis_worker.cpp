#include "analysis_worker.h"

#include <QDir>
#include <algorithm>
#include <exception>

#include "display_message.h"
#include "eval_runner.h"  // app/cli: the replay loop of `trimkv eval`, shared so the numbers agree
#include "session_worker.h"
#include "worker_support.h"
#include "trimkv/core/error.h"
#include "trimkv/vision/world.h"
#include "trimkv/vision/world_eval.h"

using trimkv::vision::ChatEngine;
namespace world = trimkv::vision::world;

void registerAnalysisTypes() {
  registerSessionTypes();
  qRegisterMetaType<CompareRequest>("CompareRequest");
  qRegisterMetaType<EvalRequest>("EvalRequest");
  qRegisterMetaType<EvalCell>("EvalCell");
}

AnalysisWorker::AnalysisWorker(QObject* parent) : QObject(parent) { registerAnalysisTypes(); }

AnalysisWorker::~AnalysisWorker() = default;

void AnalysisWorker::requestStop() { m_cancel.store(true); }

ChatEngine& AnalysisWorker::engineFor(const QString& dir, const QString& gates,
                                      const std::vector<trimkv::TemplateVar>& templateVars) {
  if (!m_engine || m_modelDir != dir || m_gates != gates) {
    m_engine.reset();  // one engine at a time: the old one's memory goes first
    m_modelDir.clear();
    Q_EMIT progress(0, 0, tr("Loading the model for this job…"));
    trimkv::EngineOptions options;
    options.gates = gates.toStdString();
    m_engine = ChatEngine::load(dir.toStdString(), options);
    m_modelDir = dir;
    m_gates = gates;
  }
  // The conversation renders as the chat's does (resets the engine's conversation).
  m_engine->set_template_variables(templateVars);
  return *m_engine;
}

void AnalysisWorker::releaseEngine() {
  m_engine.reset();
  m_modelDir.clear();
  Q_EMIT engineReleased();
}

InspectorFrame AnalysisWorker::frame() const {
  InspectorFrame f;
  f.state = m_engine->state();
  f.kv = std::make_shared<const trimkv::KvSnapshot>(m_engine->snapshot());
  f.tokens = std::make_shared<const std::vector<trimkv::vision::StreamToken>>(m_engine->tokens(0));
  f.trace = std::make_shared<const trimkv::Trace>(m_engine->trace());
  f.phase = QStringLiteral("idle");
  return f;
}

void AnalysisWorker::runCompare(const CompareRequest& request) {
  BusyScope<AnalysisWorker> busy(this);
  std::string system;
  std::vector<const trimkv::Message*> users;
  for (const trimkv::Message& m : request.messages) {
    if (m.role == "system")
      for (const trimkv::ContentPart& p : m.content) system += p.text;
    else if (m.role == "user")
      users.push_back(&m);
  }
  if (users.empty()) {
    Q_EMIT failed(tr("Nothing to compare"), tr("The conversation has no message yet: send one first."));
    Q_EMIT compareFinished(true);
    return;
  }
  const int total = 2 * static_cast<int>(users.size());
  try {
    ChatEngine& engine = engineFor(request.modelDir, request.gates, request.templateVars);
    for (int side = 0; side < 2; ++side) {
      engine.set_eviction(request.sides[side]);  // checked against the model before any work
      engine.set_system_prompt(system);
      engine.reset();  // a fresh evictor under this side's settings
      for (size_t t = 0; t < users.size(); ++t) {
        const DisplayMessage shown = displayMessage(*users[t]);
        Q_EMIT progress(side * static_cast<int>(users.size()) + static_cast<int>(t), total,
                        tr("%1: turn %2 of %3").arg(side == 0 ? QStringLiteral("A") : QStringLiteral("B"))
                            .arg(t + 1).arg(users.size()));
        engine.add_user_turn(users[t]->content, &m_cancel);
        const trimkv::GenerationResult result = engine.respond(request.params, {}, &m_cancel);
        if (m_cancel.load()) throw trimkv::Error(trimkv::ErrorKind::Cancelled, "compare cancelled");
        Q_EMIT compareAnswer(side, static_cast<int>(t), shown.text, QString::fromStdString(result.text));
        Q_EMIT compareFrame(side, frame());
      }
    }
  } catch (const std::exception& e) {
    if (m_engine) {
      try {
        m_engine->reset();
      } catch (const std::exception&) {
        m_engine.reset();  // cannot be trusted any more: loaded again by the next job
        m_modelDir.clear();
      }
    }
    if (!isCancelled(e) && !m_cancel.load()) Q_EMIT failed(tr("Cannot compare"), errorText(e));
    Q_EMIT compareFinished(true);
    return;
  }
  Q_EMIT progress(total, total, tr("Done"));
  Q_EMIT compareFinished(false);
}

void AnalysisWorker::runEvaluation(const EvalRequest& request) {
  BusyScope<AnalysisWorker> busy(this);
  try {
    if (request.conversations <= 0) throw trimkv::Error(trimkv::ErrorKind::Input, "the test set needs at least one conversation");
    // The test set: generated once per (seed, size, options), kept for the worker's life.
    if (!m_worldDir || m_worldSeed != request.seed || m_worldCount != request.conversations ||
        m_worldImages != request.maxImages || m_worldTurns != request.maxTurns) {
      Q_EMIT progress(0, 0, tr("Writing the test set…"));
      m_worldDir = std::make_unique<QTemporaryDir>();
      TRIMKV_CHECK(m_worldDir->isValid(), Io, "cannot create a temporary folder for the test set: ",
                   m_worldDir->errorString().toStdString());
      world::WorldOptions options;
      options.max_images = request.maxImages;
      options.max_turns = request.maxTurns;
      world::write_world(m_worldDir->path().toStdString(), world::Split::Test, request.seed, request.conversations,
                         options);
      m_worldSeed = request.seed;
      m_worldCount = request.conversations;
      m_worldImages = request.maxImages;
      m_worldTurns = request.maxTurns;
    }
    const std::string data = QDir(m_worldDir->path()).filePath(QStringLiteral("test.jsonl")).toStdString();
    std::vector<std::string> readFailures;
    const std::vector<world::WorldRecord> conversations = world::read_world_jsonl(data, -1, &readFailures);
    TRIMKV_CHECK(!conversations.empty(), Input, data, ": no conversation to evaluate");

    ChatEngine& engine = engineFor(request.modelDir, request.gates);
    const trimkv::ModelInfo info = engine.info();
    const qint64 heads = static_cast<qint64>(info.n_layer) * static_cast<qint64>(info.n_kv_head);

    struct Cell {
      std::string policy;
      qint64 budget = 0;
    };
    std::vector<Cell> cells{{"full", 0}};
    for (const QString& policy : request.policies)
      if (policy != QLatin1String("full"))
        for (qint64 b : request.budgets) cells.push_back({policy.toStdString(), b});
    // Every cell's settings checked against the model before the first runs: a budget a policy
    // cannot take is an error now, not after the reference.
    for (const Cell& c : cells) {
      trimkv::EvictionSettings s;
      s.policy = c.policy;
      if (c.policy != "full") s.budget_per_head = c.budget;
      engine.set_eviction(s);
    }

    const int total = static_cast<int>(cells.size() * conversations.size());
    int done = 0;
    trimkv::cli::EvalRunOptions run;
    run.data = data;
    run.params = request.params;
    run.gold_history = true;
    run.progress = false;
    run.cancel = &m_cancel;
    for (const Cell& c : cells) {
      trimkv::EvictionSettings s;
      s.policy = c.policy;
      if (c.policy != "full") s.budget_per_head = c.budget;
      engine.set_eviction(s);
      std::vector<world::EvalRecord> records;
      qint64 failures = static_cast<qint64>(readFailures.size());
      const QString label = c.policy == "full" ? tr("full cache")
                                               : tr("%1 at %2 entries/head").arg(QString::fromStdString(c.policy)).arg(c.budget);
      // One conversation at a time through the CLI's loop: progress, and a prompt cancel.
      for (const world::WorldRecord& conv : conversations) {
        Q_EMIT progress(done, total, tr("%1: conversation %2 of %3").arg(label).arg(done % conversations.size() + 1)
                                         .arg(conversations.size()));
        const trimkv::cli::EvalRunResult r = trimkv::cli::run_world_eval(engine, {conv}, {}, run);
        if (r.cancelled || m_cancel.load()) {
          engine.reset();
          Q_EMIT progress(done, total, tr("Cancelled"));
          Q_EMIT evalFinished(true);
          return;
        }
        failures += static_cast<qint64>(r.failures.size());
        records.insert(records.end(), r.records.begin(), r.records.end());
        ++done;
      }
      const world::EvalSummary summary = world::summarize(records);
      EvalCell cell;
      cell.policy = QString::fromStdString(c.policy);
      cell.budgetPerHead = c.budget;
      cell.budgetGlobal = c.budget * heads;
      cell.accuracy = summary.all.accuracy();
      cell.n = summary.all.n;
      cell.correct = summary.all.correct;
      cell.failures = failures;
      cell.meanKvEntries = summary.mean_kv_entries;
      cell.maxKvEntries = summary.max_kv_entries;
      cell.seconds = summary.seconds;
      Q_EMIT evalCell(cell);
    }
    engine.reset();
    Q_EMIT progress(total, total, tr("Done"));
  } catch (const std::exception& e) {
    if (m_engine) {
      try {
        m_engine->reset();
      } catch (const std::exception&) {
        m_engine.reset();
        m_modelDir.clear();
      }
    }
    if (!isCancelled(e) && !m_cancel.load()) Q_EMIT failed(tr("Cannot evaluate"), errorText(e));
    Q_EMIT evalFinished(true);
    return;
  }
  Q_EMIT evalFinished(false);
}
