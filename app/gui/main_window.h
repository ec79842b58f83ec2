// The main window: toolbar (model, policy, budget), conversation on the left, the inspector
// (head grid, head strip, image overlay) on the right, status bar. Talks to its SessionWorker
// only through queued calls and the worker's value signals; re-emits what tests and the
// screenshot mode need as its own (GUI-thread) signals.
#pragma once
#include <QMainWindow>
#include <QStringList>
#include <QThread>

#include <functional>
#include <optional>

#include "analysis_worker.h"
#include "budget_units.h"
#include "conversation_view.h"
#include "frame_history.h"
#include "session_types.h"

class AnalysisWorker;
class BudgetControl;
class CompareWindow;
class ConversationList;
class EvaluateWindow;
class QActionGroup;
class QDockWidget;
class QScrollArea;
class TourPanel;
class ChatInput;
class DraftKeeper;
class PolicyOptionsForm;
class QToolButton;
class GenerationSettings;
class HeadGrid;
class HeadStrip;
class ImageOverlay;
class TimelineChart;
class QTabWidget;
class QAction;
class QCheckBox;
class QComboBox;
class ModelPicker;
class QLabel;
class QMenu;
class QPushButton;
class QSlider;
class QSpinBox;
class QTimer;
class SessionWorker;
class SystemPromptPanel;

class MainWindow : public QMainWindow {
  Q_OBJECT

 public:
  // Default budget of a fresh window, in entries per layer and KV head.
  static constexpr int kDefaultBudget = 32;

  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  // Requests (all asynchronous; results arrive as signals).
  // gates: "" = the folder's own retention gates, "none", or a gates file (SessionWorker::loadModel).
  void openModel(const QString& dir, const QString& gates = QString());
  // Reloads the current model with other gates (a new conversation starts).
  void chooseGatesFile();
  // File > Open a model…: the picker (non-modal; choosing a model opens it).
  ModelPicker* pickModel();
  void sendTurn(const QString& text, const QStringList& images);  // as if typed and sent
  void stopGeneration();
  // The Stop button and Esc: stops the answer, or the model load, in flight.
  void stop();
  void regenerate();  // the last answer again, under the current settings
  // Edit-and-resend: editUserTurn puts user message `userTurn` (0-based among user messages)
  // into the input (text and images); the next send replaces it and everything after it
  // (resendUserTurn). cancelEdit leaves the conversation as it is.
  void editUserTurn(int userTurn);
  void cancelEdit();
  int editingTurn() const { return m_editTurn; }
  void resendUserTurn(int userTurn, const QString& text, const QStringList& images);
  // Re-runs the whole conversation under the current policy, budget and sampling settings.
  void replayConversation();
  // The system prompt of the next fresh conversation (as if typed into its panel).
  void setSystemPrompt(const QString& text);
  // Opens a conversation image at full size (what clicking its thumbnail does).
  void showImage(const QString& path);
  // Autosave: after every completed turn the conversation is written to `path` ("" = off, the
  // default; the application sets defaultAutosaveFile()).
  void setAutosaveFile(const QString& path);
  const QString& autosaveFile() const { return m_autosaveFile; }
  // The message being written (text and attached images) is kept in `path` as it is typed and on
  // close ("" = off, the default; the application sets defaultDraftFile()).
  void setDraftFile(const QString& path);
  // Puts the kept draft into the input when the input and the attachments are empty (its images
  // only when the model takes images); true when there was one.
  bool restoreDraft();
  // CPU threads for the model's math (0 = every core, the default; --threads, Conversation > CPU
  // threads…). threadsInUse(): what the worker thread runs with now.
  void setThreads(int threads);
  // The budget (entries per head) the next model's default policy starts at, whatever its gates
  // were trained for (--budget).
  void setStartBudget(int entriesPerHead);
  int threads() const { return m_threads; }
  // How models hold their weights ("" = the checkpoint's own bf16/f16, else f32; f32, bf16, f16,
  // q8, q4: --weights, File > Weight precision). Applies from the next load; the menu reloads.
  void setWeights(const QString& weights);
  const QString& weights() const { return m_weights; }
  // How the KV cache stores K and V ("" = the checkpoint's default, f32, bf16, f16); the next
  // load uses it (File > KV cache precision reloads).
  void setKvDtype(const QString& kvDtype);
  const QString& kvDtype() const { return m_kvDtype; }
  // Where the model runs ("" = auto: the GPU when one can be used, cpu, cuda); the next load uses
  // it (File > Device reloads).
  void setDevice(const QString& device);
  const QString& device() const { return m_device; }
  // Image resolution for loads, pixels on a side (0 = the processor's own; File > Image
  // resolution reloads).
  void setImageSize(int pixels);
  int imageSize() const { return m_imageSize; }
  int threadsInUse() const;
  static QString defaultAutosaveFile();  // <AppDataLocation>/autosave/conversation.json
  static QString defaultDraftFile();     // <AppDataLocation>/autosave/draft.json
  // When the autosave file holds a conversation, asks (non-modal) whether to open it; autosaving
  // pauses until the answer, so the conversation on offer is not overwritten meanwhile.
  void offerAutosaveRestore();
  // Exports (File > Export). Each reports a problem as an error dialog and returns false.
  enum class Figure { HeadGrid, ImageOverlay, Timeline };
  bool exportFigureTo(Figure figure, const QString& path);  // .png or .svg
  bool exportTraceTo(const QString& path);                  // the eviction trace, JSON
  bool exportHeadCountsTo(const QString& path);             // kept entries per head (as shown), CSV
  void newConversation();
  // Conversation > Chat template variables…: "name=value" lines for the template (a new
  // conversation starts with them).
  void editTemplateVariables();
  void editThreads();  // Conversation > CPU threads…
  void setTemplateVariables(const QStringList& lines);
  QStringList templateVariables() const;  // NAME=VALUE lines
  void saveConversation(const QString& path);
  void loadConversation(const QString& path);
  void addAttachments(const QStringList& paths);  // images for the next message
  void clearAttachments();
  void setGenerationParams(const trimkv::GenerationParams& params);
  // Window layout, policy and budget from QSettings; from then on they are saved on close.
  // (Not called by tests or the screenshot mode, which want the defaults.)
  void restoreSettings();
  // Error dialogs are non-modal (open()), so nothing blocks; tests may turn them off.
  void setErrorDialogsEnabled(bool enabled) { m_errorDialogs = enabled; }
  // Reports a problem: errorReported, then (when enabled) a non-modal dialog naming it.
  void showError(const QString& title, const QString& message);

  // For tests and the screenshot mode.
  bool isBusy() const { return m_busy; }
  bool isAnswering() const { return m_answering; }
  const InspectorFrame& lastFrame() const { return m_lastFrame; }  // the newest (live)
  const InspectorFrame& shownFrame() const { return m_shownFrame; }  // what the views draw
  const FrameHistory& history() const { return m_history; }
  QSlider* scrubber() const { return m_scrubber; }
  bool isScrubbing() const { return m_scrubbing; }
  // Shows history frame `index` in the grid, strip and overlay (the last one: live again).
  void scrubTo(int index);
  const ModelSummary& model() const { return m_model; }
  const trimkv::EvictionSettings& eviction() const { return m_eviction; }  // in force in the worker
  HeadGrid* headGrid() const { return m_grid; }
  HeadStrip* headStrip() const { return m_strip; }
  ImageOverlay* imageOverlay() const { return m_overlay; }
  QCheckBox* allHeadsToggle() const { return m_allHeads; }
  QComboBox* shadeCombo() const { return m_shade; }
  TimelineChart* timeline() const { return m_timeline; }
  ConversationView* conversation() const { return m_conversation; }
  ChatInput* input() const { return m_input; }
  QComboBox* policyCombo() const { return m_policy; }
  GenerationSettings* generationSettings() const { return m_generation; }
  SystemPromptPanel* systemPromptPanel() const { return m_systemPanel; }
  QAction* replayAction() const { return m_replayAction; }
  BudgetControl* budgetControl() const { return m_budget; }
  PolicyOptionsForm* policyOptions() const { return m_policyOptions; }
  QPushButton* sendButton() const { return m_send; }
  const QStringList& attachments() const { return m_attachments; }
  QPushButton* stopButton() const { return m_stop; }
  QPushButton* attachButton() const { return m_attach; }
  bool imageTabVisible() const;
  QWidget* loadIndicator() const { return m_loadBar; }
  QMenu* recentMenu() const { return m_recentMenu; }
  SessionWorker* worker() const { return m_worker; }

  // Compare (two eviction settings side by side) and the mini evaluation: windows of their own,
  // their work on the AnalysisWorker (a second engine on its own thread).
  void openCompare();
  void openEvaluate();
  CompareWindow* compareWindow() const { return m_compare; }
  EvaluateWindow* evaluateWindow() const { return m_evaluate; }
  AnalysisWorker* analysisWorker() const { return m_analysis; }
  QAction* compareAction() const { return m_compareAction; }
  QAction* evaluateAction() const { return m_evaluateAction; }
  // The guided tour of the sample conversation (Help > Guided tour).
  void startTour();
  TourPanel* tour() const { return m_tour; }
  // The side list of saved conversations.
  ConversationList* conversationList() const { return m_conversationList; }
  QDockWidget* conversationDock() const { return m_conversationDock; }

 Q_SIGNALS:
  void modelLoaded(const ModelSummary& model);
  void modelLoadStopped(const QString& dir);  // Stop during a load: the model in use stays
  void frameShown(const InspectorFrame& frame);
  void answerFinished(const TurnStats& stats);
  void turnFailed(const QString& message);
  void conversationSaved(const QString& path);
  void conversationLoaded(int messages);
  void evictionApplied(const trimkv::EvictionSettings& settings);
  void modelLoadStarted(const QString& dir);  // the busy indicator is up
  void autosaved(const QString& path);
  void errorReported(const QString& title, const QString& message);

  // To the worker (queued).
  void requestLoad(const QString& dir, const QString& gates);
  void requestTurn(const QString& text, const QStringList& images);
  void requestReset();
  void requestSave(const QString& path);
  void requestOpen(const QString& path);
  void requestRegenerate();
  void requestResend(int userTurn, const QString& text, const QStringList& images);
  void requestReplay();
  void requestSystemPrompt(const QString& text);
  void requestTemplateVariables(const QStringList& lines);
  void requestAutosaveFile(const QString& path);
  void requestEviction(const trimkv::EvictionSettings& settings);
  void requestGenerationParams(const trimkv::GenerationParams& params);
  void requestThreads(int threads);
  void requestWeights(const QString& weights);
  void requestKvDtype(const QString& kvDtype);
  void requestDevice(const QString& device);
  void requestImageSize(int pixels);
  void requestTranscript();
  // To the analysis worker (queued).
  void requestCompare(const CompareRequest& request);
  void requestEvaluation(const EvalRequest& request);
  void requestReleaseAnalysisEngine();

 protected:
  void closeEvent(QCloseEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;
  // Compare / Evaluate hidden: a job of theirs is cancelled; both hidden: the analysis engine is freed.
  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  // With a demo-world model: the hint above the input says whether `text` is outside its world.
  void noteDemoWorld(const QString& text);

  void saveSettings() const;
  void buildMenus();
  void fillRecentMenu();
  void buildToolbar();
  void buildCentral();
  void buildStatusBar();
  void connectWorker();
  void buildAnalysis();  // the analysis worker, Compare and Evaluate
  void buildTour();
  void buildConversationList();
  void explainTerms();  // tooltips and What's This of the terms (budget, β, grid, strip)
  void onTranscriptForCompare(const std::vector<trimkv::Message>& messages);
  void sendSampleTurn();  // the tour's first step
  void sendFromInput();
  void chooseModelFolder();
  void chooseGgufFile();
  void attachImages();
  void scheduleEvictionChange();
  void applyEvictionFromControls();
  void updateButtons();
  bool policyUsesBudget(const std::string& policy) const;
  void updateBudgetHint();
  // The options form for `policy` with `options` shown.
  void showPolicyOptions(const std::string& policy, const std::vector<std::string>& options);

  void onModelLoaded(const ModelSummary& model);
  void onFrame(const InspectorFrame& frame);
  // Draws `frame` in the grid, strip, overlay and head label (not the status bar).
  void showFrame(const InspectorFrame& frame);
  void updateScrubber();
  void onTurnFinished(const TurnStats& stats);
  void onTurnFailed(const QString& message);
  void onEvictionApplied(const trimkv::EvictionSettings& settings);
  // Whether a Compare or Evaluate job may start: a model is loaded and the other window's job is
  // not running; otherwise a dialog says why.
  bool analysisMayStart(const QString& title, bool otherRunning, const QString& busyTitle,
                        const QString& busyText);
  void onHeadSelected(int layer, int head);
  void onConversationLoaded(const std::vector<trimkv::Message>& messages);
  void onReplayStarted(const QString& systemText);
  void onUserTurnStarted(const QString& text, const QStringList& images);
  void onAnswerReplayed(const TurnStats& stats);
  // Sends the panel's system prompt to the worker when it differs from what was sent last.
  void syncSystemPrompt();
  // Shows the turn's figures in the status bar; the note for the answer ("stopped"...).
  QString showTurnStats(const TurnStats& stats);
  void updateEditBanner();
  void chooseConversationToSave();
  void chooseConversationToOpen();
  void chooseExport(Figure figure);
  void chooseDataExport(bool trace);
  // Runs `write` and reports a failure under `title`; true when it succeeded.
  bool tryExport(const QString& title, const std::function<void()>& write);

  QThread m_thread;
  QThread m_analysisThread;
  AnalysisWorker* m_analysis = nullptr;  // lives on m_analysisThread; deleted when it finishes
  CompareWindow* m_compare = nullptr;
  EvaluateWindow* m_evaluate = nullptr;
  QAction* m_compareAction = nullptr;
  QAction* m_evaluateAction = nullptr;
  QAction* m_templateVarsAction = nullptr;
  std::vector<trimkv::TemplateVar> m_templateVars;  // of the chat (and Compare)
  bool m_comparePending = false;  // waiting for the transcript to start a comparison
  trimkv::EvictionSettings m_compareSides[2];
  TourPanel* m_tour = nullptr;
  std::unique_ptr<QTemporaryDir> m_sampleDir;  // the tour's sample image
  ConversationList* m_conversationList = nullptr;
  QDockWidget* m_conversationDock = nullptr;
  QScrollArea* m_stripScroll = nullptr;
  QString m_openingConversation;  // the file of the open request in flight (for the list)
  SessionWorker* m_worker = nullptr;  // lives on m_thread; deleted when it finishes

  QLabel* m_modelLabel = nullptr;
  QComboBox* m_policy = nullptr;
  BudgetControl* m_budget = nullptr;
  std::optional<BudgetUnit> m_budgetUnit;  // restored from the settings, not yet shown
  PolicyOptionsForm* m_policyOptions = nullptr;
  QToolButton* m_optionsButton = nullptr;
  QTimer* m_evictionDebounce = nullptr;  // coalesces budget edits into one request
  GenerationSettings* m_generation = nullptr;
  SystemPromptPanel* m_systemPanel = nullptr;
  QString m_systemSent;  // the system prompt the worker has
  QLabel* m_editBanner = nullptr;
  QPushButton* m_cancelEdit = nullptr;
  QWidget* m_editRow = nullptr;
  int m_editTurn = -1;  // the user message being edited (-1: none)

  ConversationView* m_conversation = nullptr;
  ChatInput* m_input = nullptr;
  QLabel* m_attachLabel = nullptr;
  QLabel* m_demoHint = nullptr;  // what a demo-world model knows ("Try your own"), shown only for one
  bool m_demoWorld = false;      // the loaded model is a demo-world model
  QPushButton* m_clearAttach = nullptr;
  QPushButton* m_attach = nullptr;  // disabled for a text model
  QPushButton* m_send = nullptr;
  QPushButton* m_stop = nullptr;

  HeadGrid* m_grid = nullptr;
  QLabel* m_headLabel = nullptr;
  QCheckBox* m_allHeads = nullptr;
  QComboBox* m_shade = nullptr;  // the head strip's band: β | score | none
  HeadStrip* m_strip = nullptr;
  ImageOverlay* m_overlay = nullptr;
  TimelineChart* m_timeline = nullptr;
  QTabWidget* m_lowerTabs = nullptr;  // image overlay | timeline

  QLabel* m_statusTokens = nullptr;
  QLabel* m_statusSpeed = nullptr;
  QLabel* m_statusKv = nullptr;
  QLabel* m_statusPhase = nullptr;
  QWidget* m_loadBar = nullptr;  // busy indicator while a model loads
  QMenu* m_recentMenu = nullptr;
  QString m_autosaveFile;
  DraftKeeper* m_draft = nullptr;
  QComboBox* m_gridMode = nullptr;
  int m_threads = 0;
  QString m_weights;
  QActionGroup* m_weightsGroup = nullptr;
  QString m_kvDtype;
  QActionGroup* m_kvDtypeGroup = nullptr;
  QString m_device;
  QActionGroup* m_deviceGroup = nullptr;
  int m_imageSize = 0;
  QActionGroup* m_imageSizeGroup = nullptr;
  // A File submenu of exclusive choices whose change reloads the model (kept in settingsKey).
  struct MenuChoice {
    const char* value;
    QString label, tip;
  };
  QActionGroup* addReloadingChoiceMenu(QMenu* parent, const QString& title, const QString& menuName,
                                       const QString& prefix, const std::vector<MenuChoice>& choices,
                                       std::function<QString()> current, std::function<void(const QString&)> set,
                                       const QString& settingsKey);

  ModelSummary m_model;
  bool m_hasModel = false;
  // A model is loaded and it reads text only: attached images are refused.
  bool textOnlyModel() const { return m_hasModel && !m_model.vision.takes_images(); }
  bool m_userChosePolicy = false;  // else a loaded model gets defaultEviction()
  trimkv::EvictionSettings m_eviction;  // in force in the worker
  InspectorFrame m_lastFrame;
  InspectorFrame m_shownFrame;
  FrameHistory m_history;
  QSlider* m_scrubber = nullptr;
  QLabel* m_scrubLabel = nullptr;
  QPushButton* m_liveButton = nullptr;
  bool m_scrubbing = false;  // the views show a past frame; new frames only extend the history
  std::shared_ptr<const trimkv::Trace> m_lastTrace;  // of the latest frame that carried one
  QStringList m_attachments;
  QString m_pendingText;  // the turn in flight, restored into the input if the engine refuses it
  QStringList m_pendingImages;
  bool m_regenerating = false;
  // A resend or replay in flight: the view as it was, put back if the request fails.
  bool m_rebuilding = false;
  QVector<ConversationView::Entry> m_viewBefore;
  QString m_previousAnswer;  // shown again if regenerating fails
  QAction* m_regenerateAction = nullptr;
  QAction* m_replayAction = nullptr;
  bool m_busy = false, m_loading = false, m_answering = false, m_errorDialogs = true, m_persist = false;
  bool m_budgetFromSettings = false;  // the user's budget was restored: keep it
};
