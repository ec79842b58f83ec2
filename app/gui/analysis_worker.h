// The worker behind Compare and Evaluate (STYLE.md §12, §13): a second vision::ChatEngine, loaded
// from the same model folder as the chat's, on its own QThread, so that neither job touches the
// conversation of the chat or blocks the window. One job at a time, in the order requested.
//
// Contract of the signals of one request:
//   runCompare    -> progress*, then per side (0 = A, 1 = B) and user turn compareAnswer +
//                    compareFrame, then exactly one of compareFinished (cancelled or not) or
//                    failed (then compareFinished(true) too, so a window waiting on it re-arms)
//   runEvaluation -> progress*, evalCell per (policy, budget) finished (the full cache first),
//                    then evalFinished(cancelled); on an error failed, then evalFinished(true)
//   releaseEngine -> engineReleased
// busyChanged(true/false) brackets every job. requestStop() ends the job in flight at its next
// token; the engine is then reset, ready for the next job.
#pragma once
#include <QMetaType>
#include <QObject>
#include <QString>
#include <QStringList>
#include <QTemporaryDir>
#include <atomic>
#include <memory>
#include <vector>

#include "session_types.h"

// Compare: the chat's conversation (its user turns, with their images, and its system message)
// answered anew under two eviction settings.
struct CompareRequest {
  QString modelDir;
  QString gates;  // as the chat's model was loaded (ModelSummary::gates)
  std::vector<trimkv::TemplateVar> templateVars;  // the chat's chat-template variables
  std::vector<trimkv::Message> messages;  // the transcript; assistant messages are ignored
  trimkv::EvictionSettings sides[2];
  trimkv::GenerationParams params;
};

// Evaluate: a small world test set (vision/world.h: `conversations` conversations of the test
// split from `seed`) answered under the full cache and under each of `policies` at each budget
// (entries per layer and KV head), with gold history, as `trimkv eval-sweep` does.
struct EvalRequest {
  QString modelDir;
  QString gates;  // as the chat's model was loaded (ModelSummary::gates)
  int conversations = 20;
  quint64 seed = 7;
  int maxImages = 3;  // per conversation (world options; kept small: a mini evaluation)
  int maxTurns = 3;
  QStringList policies;   // budgeted policies ("full" is always run, first, as the reference)
  QList<qint64> budgets;  // entries per head, ascending
  trimkv::GenerationParams params;
};

// One finished cell of an evaluation.
struct EvalCell {
  QString policy;          // "full" for the reference
  qint64 budgetPerHead = 0;  // 0 for the full cache
  qint64 budgetGlobal = 0;   // M_global = M·L·H_kv (0 for the full cache)
  double accuracy = 0;
  qint64 n = 0, correct = 0, failures = 0;
  double meanKvEntries = 0;
  qint64 maxKvEntries = 0;
  double seconds = 0;
};

Q_DECLARE_METATYPE(CompareRequest)
Q_DECLARE_METATYPE(EvalRequest)
Q_DECLARE_METATYPE(EvalCell)

class AnalysisWorker : public QObject {
  Q_OBJECT

 public:
  explicit AnalysisWorker(QObject* parent = nullptr);
  ~AnalysisWorker() override;

  // Thread-safe. arm() before requesting a job (the jobs do not clear the flag themselves, so a
  // stop between the request and the job's start is not lost); requestStop(): the job in flight,
  // or the one requested, stops at its next token (or between conversations).
  void arm() { m_cancel.store(false); }
  void requestStop();

 public Q_SLOTS:
  void runCompare(const CompareRequest& request);
  void runEvaluation(const EvalRequest& request);
  // Frees the engine (the second copy of the model) until the next job; engineReleased.
  void releaseEngine();

 Q_SIGNALS:
  void busyChanged(bool busy);
  void progress(int done, int total, const QString& what);
  void compareAnswer(int side, int turn, const QString& question, const QString& answer);
  void compareFrame(int side, const InspectorFrame& frame);
  void compareFinished(bool cancelled);
  void evalCell(const EvalCell& cell);
  void evalFinished(bool cancelled);
  void failed(const QString& title, const QString& message);
  void engineReleased();

 private:
  // The engine for `dir`, loaded when it is not the one held (throws what ChatEngine::load throws).
  trimkv::vision::ChatEngine& engineFor(const QString& dir, const QString& gates,
                                        const std::vector<trimkv::TemplateVar>& templateVars = {});
  InspectorFrame frame() const;

  std::unique_ptr<trimkv::vision::ChatEngine> m_engine;
  QString m_modelDir, m_gates;
  std::atomic<bool> m_cancel{false};
  std::unique_ptr<QTemporaryDir> m_worldDir;  // the generated test set, kept for the worker's life
  quint64 m_worldSeed = 0;
  int m_worldCount = 0, m_worldImages = 0, m_worldTurns = 0;
};

// Registers CompareRequest, EvalRequest and EvalCell (and the session types) for queued connections.
void registerAnalysisTypes();
