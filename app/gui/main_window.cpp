#include "main_window.h"

#include "model_picker.h"

#include <QTextDocumentFragment>
#include <QAction>
#include <QActionGroup>
#include <QCheckBox>
#include <QCloseEvent>
#include <QDockWidget>
#include <QListWidget>
#include <QResizeEvent>
#include <QWhatsThis>
#include <QSettings>
#include <QComboBox>
#include <QFileDialog>
#include <QInputDialog>
#include <QFileInfo>
#include <QImageReader>
#include <QHBoxLayout>
#include <QIcon>
#include <QKeySequence>
#include <QLabel>
#include <QMenu>
#include <QMenuBar>
#include <QDir>
#include <QProgressBar>
#include <QStandardPaths>
#include <QMessageBox>
#include <QToolButton>
#include <QWidgetAction>
#include <QPushButton>
#include <QScrollArea>
#include <QShortcut>
#include <QSignalBlocker>
#include <QSpinBox>
#include <QSplitter>
#include <QStatusBar>
#include <QTabWidget>
#include <QTimer>
#include <QToolBar>
#include <QVBoxLayout>
#include <algorithm>
#include <exception>

#include "analysis_worker.h"
#include "chat_input.h"
#include "compare_window.h"
#include "conversation_list.h"
#include "evaluate_window.h"
#include "demo_world_hint.h"
#include "sample_turn.h"
#include "tour_panel.h"
#include "conversation_file.h"
#include "draft_keeper.h"
#include "conversation_view.h"
#include "budget_control.h"
#include "figure_export.h"
#include "generation_settings.h"
#include "recent_models.h"
#include "kv_export.h"
#include "policy_options_form.h"
#include "head_grid.h"
#include "head_strip.h"
#include "image_overlay.h"
#include "image_viewer.h"
#include "modality_palette.h"
#include "session_worker.h"
#include "system_prompt_panel.h"
#include "display_message.h"
#include "timeline_chart.h"
#include "trimkv/core/compute_device.h"
#include "trimkv/core/default_model.h"
#include "trimkv/core/error.h"

namespace {

// Bytes for reading: "12.0 MiB", or KiB below 1 MiB (tiny models would read "0.0 MiB").
QString bytesText(int64_t bytes) {
  const double kib = static_cast<double>(bytes) / 1024.0;
  if (kib < 1024.0) return QStringLiteral("%1 KiB").arg(kib, 0, 'f', 1);
  return QStringLiteral("%1 MiB").arg(kib / 1024.0, 0, 'f', 1);
}

QString grouped(int64_t n) { return QLocale(QLocale::English).toString(static_cast<qlonglong>(n)); }

QString legendHtml() {
  auto swatch = [](const QColor& c, const QString& name) {
    return QStringLiteral("<span style='color:%1'>&#9632;</span>&nbsp;%2").arg(c.name(), name);
  };
  return swatch(ModalityPalette::text(), QObject::tr("text")) + QStringLiteral(" &nbsp; ") +
         swatch(ModalityPalette::image(), QObject::tr("image")) + QStringLiteral(" &nbsp; ") +
         swatch(ModalityPalette::special(), QObject::tr("special")) + QStringLiteral(" &nbsp; ") +
         QObject::tr("(faded: evicted)");
}

}  // namespace

// The resources live in the static library trimkv_studio_gui: referencing them here keeps the
// linker from dropping them.
static void initStudioResources() { Q_INIT_RESOURCE(studio); }

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  initStudioResources();
  registerSessionTypes();
  setWindowIcon(QIcon(QStringLiteral(":/trimkv-studio.svg")));
  setWindowTitle(tr("TrimKV Studio"));
  resize(1280, 800);

  m_worker = new SessionWorker;
  m_worker->moveToThread(&m_thread);
  connect(&m_thread, &QThread::finished, m_worker, &QObject::deleteLater);
  m_thread.setObjectName(QStringLiteral("SessionWorker"));

  buildMenus();
  buildToolbar();
  buildCentral();
  buildStatusBar();
  connectWorker();
  buildAnalysis();
  buildConversationList();
  buildTour();
  explainTerms();
  updateButtons();
  // The workers' threads start once every connection to them is made: connecting to an object
  // whose thread already runs races with its signal emission (ThreadSanitizer showed it).
  m_thread.start();
  m_analysisThread.start();
}

MainWindow::~MainWindow() {
  // Stop the turn in flight, let the worker finish its current request, then delete it on its
  // own thread (QThread::finished -> deleteLater).
  m_worker->requestStop();
  m_thread.quit();
  m_thread.wait();
  m_analysis->requestStop();
  m_analysisThread.quit();
  m_analysisThread.wait();
}

void MainWindow::buildMenus() {
  QMenu* file = menuBar()->addMenu(tr("&File"));
  QAction* pick = file->addAction(tr("Open &a model…"));
  pick->setObjectName(QStringLiteral("pickModelAction"));
  pick->setToolTip(tr("The models on this machine: the built-in demo model, the Hugging Face cache and recent "
                      "folders (Ctrl+Shift+M)"));
  pick->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_M));
  connect(pick, &QAction::triggered, this, &MainWindow::pickModel);
  QAction* open = file->addAction(tr("Open &model folder…"));
  open->setObjectName(QStringLiteral("openModelAction"));
  open->setToolTip(tr("Open a model folder (a Hugging Face checkpoint of a supported family) (Ctrl+Shift+O)"));
  open->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_O));
  connect(open, &QAction::triggered, this, &MainWindow::chooseModelFolder);
  QAction* openGguf = file->addAction(tr("Open a &GGUF file…"));
  openGguf->setObjectName(QStringLiteral("openGgufAction"));
  openGguf->setToolTip(tr("Open a model held as llama.cpp holds it: one .gguf file (llama, qwen2, qwen3; f32, f16, "
                          "bf16, q8_0, q4_0, q4_1) with its tokenizer and chat template"));
  connect(openGguf, &QAction::triggered, this, &MainWindow::chooseGgufFile);
  QMenu* gates = file->addMenu(tr("Retention &gates"));
  gates->setToolTipsVisible(true);
  QAction* gatesFile = gates->addAction(tr("Choose a gates &file…"));
  gatesFile->setObjectName(QStringLiteral("chooseGatesAction"));
  gatesFile->setToolTip(tr("Reload the model with a retention-gates file (ours .safetensors or the reference's "
                           "trimkv_weights.pth); a file made for another model is refused"));
  connect(gatesFile, &QAction::triggered, this, &MainWindow::chooseGatesFile);
  QAction* ownGates = gates->addAction(tr("The model folder's &own"));
  connect(ownGates, &QAction::triggered, this, [this] { openModel(m_model.dir, QString()); });
  QAction* noGates = gates->addAction(tr("&None"));
  noGates->setToolTip(tr("Reload the model without gates (dbtrimkv and trimkv then cannot run)"));
  connect(noGates, &QAction::triggered, this, [this] { openModel(m_model.dir, QStringLiteral("none")); });
  m_weightsGroup = addReloadingChoiceMenu(
      file, tr("Weight &precision"), QStringLiteral("weightsMenu"), QStringLiteral("weights"),
      {{"", tr("The checkpoint's &own"), tr("bf16 / f16 / GGUF-quantised files stay as stored, f32 ones in f32")},
       {"f32", tr("f&32"), tr("float32: exact, 4 bytes per weight")},
       {"bf16", tr("&bf16"), tr("bfloat16: 2 bytes per weight")},
       {"f16", tr("f&16"), tr("float16: 2 bytes per weight")},
       {"q8", tr("q&8"), tr("8-bit blocks of 32 (llama.cpp q8_0): 1.06 bytes per weight")},
       {"q4", tr("q&4"), tr("4-bit blocks of 32 (llama.cpp q4_0): 0.56 bytes per weight")}},
      [this] { return m_weights; }, [this](const QString& v) { setWeights(v); }, QStringLiteral("compute/weights"));
  m_kvDtypeGroup = addReloadingChoiceMenu(
      file, tr("&KV cache precision"), QStringLiteral("kvDtypeMenu"), QStringLiteral("kv"),
      {{"", tr("The checkpoint's &own"), tr("f16 for checkpoints stored in 16 bits or fewer (bf16, f16, GGUF q8/q4), f32 for f32 ones")},
       {"f32", tr("f&32"), tr("float32 K and V: 4 bytes per value")},
       {"bf16", tr("&bf16"), tr("bfloat16 K and V: 2 bytes per value (attention accumulates in f32)")},
       {"f16", tr("f&16"), tr("float16 K and V: 2 bytes per value (attention accumulates in f32)")}},
      [this] { return m_kvDtype; }, [this](const QString& v) { setKvDtype(v); }, QStringLiteral("compute/kv_dtype"));
  {
    std::string why;
    const bool cuda = trimkv::cuda_usable(&why);
    m_deviceGroup = addReloadingChoiceMenu(
        file, tr("&Device"), QStringLiteral("deviceMenu"), QStringLiteral("device"),
        {{"", tr("&Auto"), cuda ? tr("the GPU (found)") : tr("the CPU: %1").arg(QString::fromStdString(why))},
         {"cpu", tr("&CPU"), tr("weights, KV cache and decoder in main memory")},
         {"cuda", tr("C&UDA GPU"),
          cuda ? tr("weights, KV cache and decoder on the GPU") : tr("unavailable: %1").arg(QString::fromStdString(why))}},
        [this] { return m_device; }, [this](const QString& v) { setDevice(v); }, QStringLiteral("compute/device"));
    for (QAction* a : m_deviceGroup->actions())
      if (a->data().toString() == QLatin1String("cuda")) a->setEnabled(cuda);
  }
  m_imageSizeGroup = addReloadingChoiceMenu(
      file, tr("&Image resolution"), QStringLiteral("imageSizeMenu"), QStringLiteral("image"),
      {{"", tr("The processor's &own"), tr("as the checkpoint's image processor says")},
       {"384", tr("&384 px"), tr("SmolVLM: longest edge 384 (one tile at SigLIP-384 sizes); Qwen-VL: at most 384² pixels")},
       {"768", tr("&768 px"), tr("SmolVLM: longest edge 768; Qwen-VL: at most 768² pixels")},
       {"1536", tr("&1536 px"), tr("SmolVLM: longest edge 1536 (its default); Qwen-VL: at most 1536² pixels")}},
      [this] { return m_imageSize > 0 ? QString::number(m_imageSize) : QString(); },
      [this](const QString& v) { setImageSize(v.toInt()); }, QStringLiteral("compute/image_size"));
  m_recentMenu = file->addMenu(tr("Open &recent model"));
  connect(m_recentMenu, &QMenu::aboutToShow, this, &MainWindow::fillRecentMenu);
  fillRecentMenu();
  file->addSeparator();
  QAction* fresh = file->addAction(tr("&New conversation"));
  fresh->setObjectName(QStringLiteral("newConversationAction"));
  fresh->setShortcut(QKeySequence::New);
  fresh->setToolTip(tr("Start a new conversation with the same model and settings (Ctrl+N)"));
  fresh->setIconText(tr("New"));
  connect(fresh, &QAction::triggered, this, &MainWindow::newConversation);
  QAction* openChat = file->addAction(tr("&Open conversation…"));
  openChat->setShortcut(QKeySequence::Open);
  openChat->setToolTip(tr("Open a saved conversation and replay it under the current settings (Ctrl+O)"));
  connect(openChat, &QAction::triggered, this, &MainWindow::chooseConversationToOpen);
  QAction* saveChat = file->addAction(tr("&Save conversation…"));
  saveChat->setShortcut(QKeySequence::Save);
  saveChat->setToolTip(tr("Save the conversation as JSON, its images copied beside it (Ctrl+S)"));
  connect(saveChat, &QAction::triggered, this, &MainWindow::chooseConversationToSave);
  QMenu* exportMenu = file->addMenu(tr("&Export"));
  exportMenu->setToolTipsVisible(true);
  QAction* grid = exportMenu->addAction(tr("Head &grid (PNG or SVG)…"));
  connect(grid, &QAction::triggered, this, [this] { chooseExport(Figure::HeadGrid); });
  QAction* overlay = exportMenu->addAction(tr("Image &overlay (PNG or SVG)…"));
  connect(overlay, &QAction::triggered, this, [this] { chooseExport(Figure::ImageOverlay); });
  QAction* plot = exportMenu->addAction(tr("&Timeline plot (PNG or SVG)…"));
  connect(plot, &QAction::triggered, this, [this] { chooseExport(Figure::Timeline); });
  exportMenu->addSeparator();
  QAction* trace = exportMenu->addAction(tr("Eviction t&race (JSON)…"));
  trace->setToolTip(tr("Every compression of the conversation: when, and what each head kept and evicted"));
  connect(trace, &QAction::triggered, this, [this] { chooseDataExport(true); });
  QAction* counts = exportMenu->addAction(tr("Per-head &counts (CSV)…"));
  counts->setToolTip(tr("Entries each (layer, KV head) keeps now, by modality"));
  connect(counts, &QAction::triggered, this, [this] { chooseDataExport(false); });
  file->addSeparator();
  QAction* quit = file->addAction(tr("&Quit"));
  quit->setShortcut(QKeySequence::Quit);
  connect(quit, &QAction::triggered, this, &QWidget::close);

  QMenu* chat = menuBar()->addMenu(tr("&Conversation"));
  m_regenerateAction = chat->addAction(tr("&Regenerate the last answer"));
  m_regenerateAction->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_R));
  m_regenerateAction->setToolTip(tr("Answer the last question again under the current policy and budget: "
                                    "the conversation is replayed with them (Ctrl+R)"));
  m_regenerateAction->setIconText(tr("Regenerate"));
  connect(m_regenerateAction, &QAction::triggered, this, &MainWindow::regenerate);
  m_replayAction = chat->addAction(tr("Re&play under the current settings"));
  m_replayAction->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_R));
  m_replayAction->setToolTip(tr("Run the whole conversation again under the current policy, budget and "
                                "sampling: every question is sent again and answered anew (Ctrl+Shift+R)"));
  m_replayAction->setIconText(tr("Replay"));
  connect(m_replayAction, &QAction::triggered, this, &MainWindow::replayConversation);
  chat->addSeparator();
  m_templateVarsAction = chat->addAction(tr("Chat &template variables…"));
  m_templateVarsAction->setToolTip(tr("Variables the model's chat template reads, e.g. enable_thinking=false "
                                      "for Qwen3 (a new conversation starts with them)"));
  connect(m_templateVarsAction, &QAction::triggered, this, &MainWindow::editTemplateVariables);
  QAction* threads = chat->addAction(tr("CPU &threads…"));
  threads->setObjectName(QStringLiteral("threadsAction"));
  threads->setToolTip(tr("How many CPU threads the model's math uses (default: every core)"));
  connect(threads, &QAction::triggered, this, &MainWindow::editThreads);

  QMenu* analysis = menuBar()->addMenu(tr("&Analysis"));
  m_compareAction = analysis->addAction(tr("&Compare two settings…"));
  m_compareAction->setIconText(tr("Compare…"));
  m_compareAction->setToolTip(tr("Answer this conversation's questions under two policies or budgets and show the "
                                 "answers and inspectors side by side"));
  connect(m_compareAction, &QAction::triggered, this, &MainWindow::openCompare);
  m_evaluateAction = analysis->addAction(tr("&Mini evaluation…"));
  m_evaluateAction->setIconText(tr("Evaluate…"));
  m_evaluateAction->setToolTip(tr("Accuracy against budget on a small generated test set, with the full cache as "
                                  "the reference"));
  connect(m_evaluateAction, &QAction::triggered, this, &MainWindow::openEvaluate);

  QMenu* help = menuBar()->addMenu(tr("&Help"));
  help->setObjectName(QStringLiteral("helpMenu"));
  QAction* tourAction = help->addAction(tr("&Guided tour"));
  tourAction->setObjectName(QStringLiteral("tourAction"));
  tourAction->setToolTip(tr("A step-by-step walk through the sample conversation"));
  connect(tourAction, &QAction::triggered, this, &MainWindow::startTour);
  help->addAction(QWhatsThis::createAction(this));
}

ModelPicker* MainWindow::pickModel() {
  auto* picker = new ModelPicker(this);
  picker->setAttribute(Qt::WA_DeleteOnClose);
  connect(picker, &ModelPicker::modelChosen, this, [this](const QString& dir) { openModel(dir); });
  picker->open();
  return picker;
}

void MainWindow::fillRecentMenu() {
  m_recentMenu->clear();
  const QStringList dirs = RecentModels::load();
  for (const QString& dir : dirs) {
    QAction* a = m_recentMenu->addAction(QDir::toNativeSeparators(dir));
    a->setToolTip(dir);
    connect(a, &QAction::triggered, this, [this, dir] { openModel(dir); });
  }
  if (dirs.isEmpty()) m_recentMenu->addAction(tr("(none yet)"))->setEnabled(false);
  m_recentMenu->addSeparator();
  QAction* clear = m_recentMenu->addAction(tr("Clear the list"));
  clear->setEnabled(!dirs.isEmpty());
  connect(clear, &QAction::triggered, this, [] { RecentModels::clear(); });
}

void MainWindow::buildToolbar() {
  QToolBar* bar = addToolBar(tr("Model and policy"));
  bar->setObjectName(QStringLiteral("mainToolbar"));
  bar->setMovable(false);

  m_modelLabel = new QLabel(tr("Model: (none)"), this);
  m_modelLabel->setObjectName(QStringLiteral("modelLabel"));
  m_modelLabel->setTextInteractionFlags(Qt::TextSelectableByMouse);
  bar->addWidget(m_modelLabel);
  QAction* open = findChild<QAction*>(QStringLiteral("openModelAction"));
  auto* openButton = new QToolButton(this);
  openButton->setDefaultAction(open);
  openButton->setText(tr("Open…"));
  bar->addWidget(openButton);
  bar->addAction(findChild<QAction*>(QStringLiteral("newConversationAction")));
  bar->addAction(m_regenerateAction);

  // Second row: how the cache is kept, and sampling.
  addToolBarBreak();
  bar = addToolBar(tr("Policy and budget"));
  bar->setObjectName(QStringLiteral("policyToolbar"));
  bar->setMovable(false);
  bar->addWidget(new QLabel(tr(" Policy: "), this));
  m_policy = new QComboBox(this);
  m_policy->setToolTip(tr("Which KV entries to keep when the cache exceeds the budget. "
                          "A change applies from the next turn; Replay runs the conversation again under it."));
  m_policy->setMinimumContentsLength(12);
  bar->addWidget(m_policy);
  m_optionsButton = new QToolButton(this);
  m_optionsButton->setText(tr("Options"));
  m_optionsButton->setToolTip(tr("The options of the chosen policy (lookahead, floor, window, …)"));
  m_optionsButton->setPopupMode(QToolButton::InstantPopup);
  auto* optionsMenu = new QMenu(m_optionsButton);
  auto* optionsAction = new QWidgetAction(optionsMenu);
  m_policyOptions = new PolicyOptionsForm(optionsMenu);
  optionsAction->setDefaultWidget(m_policyOptions);
  optionsMenu->addAction(optionsAction);
  m_optionsButton->setMenu(optionsMenu);
  bar->addWidget(m_optionsButton);
  bar->addWidget(new QLabel(tr("  Budget: "), this));
  m_budget = new BudgetControl(this);
  m_budget->setEntriesPerHead(kDefaultBudget);
  bar->addWidget(m_budget);
  bar->addSeparator();
  bar->addAction(m_replayAction);
  bar->addAction(m_compareAction);
  bar->addAction(m_evaluateAction);
  bar->addSeparator();
  auto* genButton = new QToolButton(this);
  genButton->setText(tr("Generation"));
  genButton->setToolTip(tr("Sampling settings of the next answers"));
  genButton->setPopupMode(QToolButton::InstantPopup);
  auto* genMenu = new QMenu(genButton);
  auto* genAction = new QWidgetAction(genMenu);
  m_generation = new GenerationSettings(genMenu);
  genAction->setDefaultWidget(m_generation);
  genMenu->addAction(genAction);
  genButton->setMenu(genMenu);
  bar->addWidget(genButton);
  connect(m_generation, &GenerationSettings::paramsChanged, this, &MainWindow::requestGenerationParams);

  m_evictionDebounce = new QTimer(this);
  m_evictionDebounce->setSingleShot(true);
  m_evictionDebounce->setInterval(250);
  connect(m_evictionDebounce, &QTimer::timeout, this, &MainWindow::applyEvictionFromControls);
  connect(m_policy, qOverload<int>(&QComboBox::activated), this, [this](int) {
    m_userChosePolicy = true;
    showPolicyOptions(m_policy->currentData().toString().toStdString(), {});
    applyEvictionFromControls();
  });
  connect(m_budget, &BudgetControl::budgetEdited, this, &MainWindow::scheduleEvictionChange);
  connect(m_policyOptions, &PolicyOptionsForm::optionsEdited, this, [this] {
    m_userChosePolicy = true;
    scheduleEvictionChange();
  });
}

void MainWindow::buildCentral() {
  auto* split = new QSplitter(Qt::Horizontal, this);
  split->setObjectName(QStringLiteral("mainSplitter"));

  // Left: the conversation.
  auto* left = new QWidget(split);
  auto* leftLayout = new QVBoxLayout(left);
  leftLayout->setContentsMargins(6, 6, 6, 6);
  m_systemPanel = new SystemPromptPanel(left);
  connect(m_systemPanel, &SystemPromptPanel::textEdited, this, [this] {
    syncSystemPrompt();
    updateButtons();
  });
  leftLayout->addWidget(m_systemPanel);
  m_conversation = new ConversationView(left);
  connect(m_conversation, &ConversationView::editRequested, this, &MainWindow::editUserTurn);
  connect(m_conversation, &ConversationView::imageClicked, this, &MainWindow::showImage);
  leftLayout->addWidget(m_conversation, 1);
  m_editRow = new QWidget(left);
  auto* editLayout = new QHBoxLayout(m_editRow);
  editLayout->setContentsMargins(0, 0, 0, 0);
  m_editBanner = new QLabel(m_editRow);
  m_editBanner->setWordWrap(true);
  m_cancelEdit = new QPushButton(tr("Cancel edit"), m_editRow);
  connect(m_cancelEdit, &QPushButton::clicked, this, &MainWindow::cancelEdit);
  editLayout->addWidget(m_editBanner, 1);
  editLayout->addWidget(m_cancelEdit);
  m_editRow->setVisible(false);
  leftLayout->addWidget(m_editRow);
  m_demoHint = new QLabel(left);
  m_demoHint->setObjectName(QStringLiteral("demoHint"));
  m_demoHint->setWordWrap(true);
  m_demoHint->setTextFormat(Qt::RichText);
  m_demoHint->setFrameShape(QFrame::StyledPanel);
  m_demoHint->setMargin(4);
  m_demoHint->setVisible(false);
  leftLayout->addWidget(m_demoHint);
  auto* attachRow = new QHBoxLayout;
  m_attachLabel = new QLabel(left);
  m_attachLabel->setObjectName(QStringLiteral("attachLabel"));
  m_attachLabel->setWordWrap(true);
  m_clearAttach = new QPushButton(tr("Remove images"), left);
  m_clearAttach->setVisible(false);
  connect(m_clearAttach, &QPushButton::clicked, this, &MainWindow::clearAttachments);
  attachRow->addWidget(m_attachLabel, 1);
  attachRow->addWidget(m_clearAttach);
  leftLayout->addLayout(attachRow);
  auto* inputRow = new QHBoxLayout;
  auto* attach = new QPushButton(tr("Attach image…"), left);
  m_attach = attach;
  attach->setToolTip(tr("Attach images to the next message (or drop them onto the input)"));
  connect(attach, &QPushButton::clicked, this, &MainWindow::attachImages);
  m_input = new ChatInput(left);
  m_input->setMaximumHeight(90);
  connect(m_input, &ChatInput::imagesAdded, this, &MainWindow::addAttachments);
  m_draft = new DraftKeeper([this] { return DraftKeeper::Draft{m_input->toPlainText(), m_attachments}; }, this);
  connect(m_input, &QPlainTextEdit::textChanged, m_draft, &DraftKeeper::changed);
  connect(m_draft, &DraftKeeper::failed, this, [this](const QString& message) { statusBar()->showMessage(message, 10000); });
  m_send = new QPushButton(tr("Send"), left);
  m_send->setToolTip(tr("Send the message (Ctrl+Return)"));
  m_send->setDefault(true);
  connect(m_send, &QPushButton::clicked, this, &MainWindow::sendFromInput);
  m_stop = new QPushButton(tr("Stop"), left);
  m_stop->setToolTip(tr("Stop the answer, or the model load (Esc)"));
  connect(m_stop, &QPushButton::clicked, this, &MainWindow::stop);
  auto* buttons = new QVBoxLayout;
  buttons->addWidget(m_send);
  buttons->addWidget(m_stop);
  inputRow->addWidget(attach, 0, Qt::AlignTop);
  inputRow->addWidget(m_input, 1);
  inputRow->addLayout(buttons);
  leftLayout->addLayout(inputRow);

  auto* sendKey = new QShortcut(QKeySequence(Qt::CTRL | Qt::Key_Return), this);
  connect(sendKey, &QShortcut::activated, this, &MainWindow::sendFromInput);
  auto* sendKey2 = new QShortcut(QKeySequence(Qt::CTRL | Qt::Key_Enter), this);
  connect(sendKey2, &QShortcut::activated, this, &MainWindow::sendFromInput);
  auto* stopKey = new QShortcut(QKeySequence(Qt::Key_Escape), this);
  connect(stopKey, &QShortcut::activated, this, &MainWindow::stop);

  // Right: the inspector.
  auto* right = new QSplitter(Qt::Vertical, split);
  right->setObjectName(QStringLiteral("inspectorSplitter"));
  auto* gridBox = new QWidget(right);
  auto* gridLayout = new QVBoxLayout(gridBox);
  gridLayout->setContentsMargins(6, 6, 6, 0);
  auto* scrubRow = new QHBoxLayout;
  auto* scrubTitle = new QLabel(tr("History:"), gridBox);
  m_scrubber = new QSlider(Qt::Horizontal, gridBox);
  m_scrubber->setRange(0, 0);
  m_scrubber->setToolTip(tr("Go back to an earlier step of the conversation (one stop per eviction event and per "
                            "answer, the last %1 kept): the grid, the head strip and the image show the cache as it "
                            "was then").arg(FrameHistory::kMaxFrames));
  m_scrubLabel = new QLabel(tr("live"), gridBox);
  m_scrubLabel->setMinimumWidth(150);
  m_liveButton = new QPushButton(tr("Live"), gridBox);
  m_liveButton->setToolTip(tr("Back to the cache as it is now"));
  m_liveButton->setEnabled(false);
  connect(m_scrubber, &QSlider::valueChanged, this, &MainWindow::scrubTo);
  connect(m_liveButton, &QPushButton::clicked, this, [this] { scrubTo(m_history.size() - 1); });
  scrubRow->addWidget(scrubTitle);
  scrubRow->addWidget(m_scrubber, 1);
  scrubRow->addWidget(m_scrubLabel);
  scrubRow->addWidget(m_liveButton);
  gridLayout->addLayout(scrubRow);
  auto* gridTitleRow = new QHBoxLayout;
  auto* gridTitle = new QLabel(tr("<b>KV entries kept per layer and KV head</b> &nbsp; ") + legendHtml(), gridBox);
  m_gridMode = new QComboBox(gridBox);
  m_gridMode->setObjectName(QStringLiteral("gridMode"));
  m_gridMode->addItem(tr("cells: auto"), static_cast<int>(HeadGrid::Mode::Auto));
  m_gridMode->addItem(tr("cells: bars"), static_cast<int>(HeadGrid::Mode::Bars));
  m_gridMode->addItem(tr("cells: heatmap"), static_cast<int>(HeadGrid::Mode::Heatmap));
  m_gridMode->setToolTip(tr("Bars: each head's kept entries by modality, relative to the fullest head. Heatmap: "
                            "the fraction of the conversation each head keeps, dark violet (little) to yellow "
                            "(all), its text / image split along the bottom. Auto: heatmap when cells are small."));
  gridTitleRow->addWidget(gridTitle, 1);
  gridTitleRow->addWidget(m_gridMode);
  gridLayout->addLayout(gridTitleRow);
  m_grid = new HeadGrid(gridBox);
  connect(m_gridMode, qOverload<int>(&QComboBox::currentIndexChanged), this,
          [this](int) { m_grid->setMode(static_cast<HeadGrid::Mode>(m_gridMode->currentData().toInt())); });
  gridLayout->addWidget(m_grid, 1);
  connect(m_grid, &HeadGrid::headSelected, this, &MainWindow::onHeadSelected);

  auto* stripBox = new QWidget(right);
  auto* stripLayout = new QVBoxLayout(stripBox);
  stripLayout->setContentsMargins(6, 0, 6, 0);
  auto* headRow = new QHBoxLayout;
  m_headLabel = new QLabel(tr("<b>Head detail</b>: click a cell above"), stripBox);
  m_allHeads = new QCheckBox(tr("All heads"), stripBox);
  m_allHeads->setToolTip(tr("Shade every position and patch by how many heads keep it, instead of one head"));
  connect(m_allHeads, &QCheckBox::toggled, this, [this](bool all) {
    m_strip->setAllHeads(all);
    m_overlay->setAllHeads(all);
    onHeadSelected(m_grid->selectedLayer(), m_grid->selectedHead());
  });
  m_shade = new QComboBox(stripBox);
  m_shade->addItem(tr("band: β"), static_cast<int>(HeadStrip::Shade::Beta));
  m_shade->addItem(tr("band: score"), static_cast<int>(HeadStrip::Shade::Score));
  m_shade->addItem(tr("band: none"), static_cast<int>(HeadStrip::Shade::None));
  m_shade->setToolTip(tr("The band under each kept position, dark violet (low) to yellow (high): β, the "
                         "retention gate's per-step keep factor (1 = never forgotten), or the policy's score "
                         "scaled over this head's kept entries"));
  connect(m_shade, qOverload<int>(&QComboBox::currentIndexChanged), this, [this](int) {
    m_strip->setShade(static_cast<HeadStrip::Shade>(m_shade->currentData().toInt()));
  });
  auto zoomButton = [&](const QString& text, const QString& tip, const char* name) {
    auto* b = new QToolButton(stripBox);
    b->setText(text);
    b->setToolTip(tip);
    b->setObjectName(QString::fromLatin1(name));
    headRow->addWidget(b);
    return b;
  };
  headRow->addWidget(m_headLabel, 1);
  connect(zoomButton(QStringLiteral("−"), tr("Narrower positions: more of the conversation per row (Ctrl+wheel)"),
                     "stripZoomOut"),
          &QToolButton::clicked, this, [this] { m_strip->zoomOut(); });
  connect(zoomButton(QStringLiteral("+"), tr("Wider positions (Ctrl+wheel)"), "stripZoomIn"), &QToolButton::clicked, this,
          [this] { m_strip->zoomIn(); });
  connect(zoomButton(tr("Fit"), tr("Positions sized to the width"), "stripZoomFit"), &QToolButton::clicked, this,
          [this] { m_strip->setCellWidth(0); });
  headRow->addWidget(m_shade);
  headRow->addWidget(m_allHeads);
  stripLayout->addLayout(headRow);
  auto* stripScroll = new QScrollArea(stripBox);
  m_stripScroll = stripScroll;
  stripScroll->setWidgetResizable(true);
  stripScroll->setFrameShape(QFrame::NoFrame);
  stripScroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  m_strip = new HeadStrip(stripScroll);
  stripScroll->setWidget(m_strip);
  stripLayout->addWidget(stripScroll, 1);

  m_lowerTabs = new QTabWidget(right);
  m_overlay = new ImageOverlay(m_lowerTabs);
  m_timeline = new TimelineChart(m_lowerTabs);
  m_lowerTabs->addTab(m_overlay, tr("Image"));
  m_lowerTabs->addTab(m_timeline, tr("Timeline"));
  right->addWidget(gridBox);
  right->addWidget(stripBox);
  right->addWidget(m_lowerTabs);
  right->setStretchFactor(0, 4);
  right->setStretchFactor(1, 2);
  right->setStretchFactor(2, 4);

  split->addWidget(left);
  split->addWidget(right);
  split->setStretchFactor(0, 4);
  split->setStretchFactor(1, 6);
  split->setSizes({520, 760});
  setCentralWidget(split);
}

void MainWindow::buildStatusBar() {
  m_statusTokens = new QLabel(this);
  m_statusSpeed = new QLabel(this);
  m_statusKv = new QLabel(this);
  m_statusPhase = new QLabel(tr("no model"), this);
  m_statusKv->setToolTip(tr("KV entries (and K+V bytes) the cache holds now, against what the full "
                            "cache would hold for the same conversation"));
  statusBar()->addWidget(m_statusTokens);
  statusBar()->addWidget(m_statusSpeed);
  statusBar()->addWidget(m_statusKv);
  auto* bar = new QProgressBar(this);
  bar->setRange(0, 0);  // busy: loading has no measurable progress
  bar->setMaximumWidth(120);
  bar->setMaximumHeight(14);
  bar->setTextVisible(false);
  bar->setToolTip(tr("Loading the model (weights, tokenizer, vision tower) on the worker thread"));
  bar->setVisible(false);
  m_loadBar = bar;
  statusBar()->addPermanentWidget(m_loadBar);
  statusBar()->addPermanentWidget(m_statusPhase);
}

void MainWindow::connectWorker() {
  // Requests: queued onto the worker's thread, executed in order.
  connect(this, &MainWindow::requestLoad, m_worker, &SessionWorker::loadModel, Qt::QueuedConnection);
  connect(this, &MainWindow::requestTurn, m_worker, &SessionWorker::sendTurn, Qt::QueuedConnection);
  connect(this, &MainWindow::requestReset, m_worker, &SessionWorker::reset, Qt::QueuedConnection);
  connect(this, &MainWindow::requestTemplateVariables, m_worker, &SessionWorker::setTemplateVariables,
          Qt::QueuedConnection);
  connect(this, &MainWindow::requestSave, m_worker, &SessionWorker::saveConversation, Qt::QueuedConnection);
  connect(this, &MainWindow::requestOpen, m_worker, &SessionWorker::loadConversation, Qt::QueuedConnection);
  connect(m_worker, &SessionWorker::conversationSaved, this, [this](const QString& path) {
    statusBar()->showMessage(tr("Saved %1").arg(path), 5000);
    if (m_persist) m_conversationList->addRecent(path);
    Q_EMIT conversationSaved(path);
  }, Qt::QueuedConnection);
  connect(m_worker, &SessionWorker::conversationLoaded, this, &MainWindow::onConversationLoaded, Qt::QueuedConnection);
  connect(this, &MainWindow::requestRegenerate, m_worker, &SessionWorker::regenerate, Qt::QueuedConnection);
  connect(this, &MainWindow::requestResend, m_worker, &SessionWorker::resendFrom, Qt::QueuedConnection);
  connect(this, &MainWindow::requestReplay, m_worker, &SessionWorker::replayConversation, Qt::QueuedConnection);
  connect(this, &MainWindow::requestSystemPrompt, m_worker, &SessionWorker::setSystemPrompt, Qt::QueuedConnection);
  connect(m_worker, &SessionWorker::replayStarted, this, &MainWindow::onReplayStarted, Qt::QueuedConnection);
  connect(m_worker, &SessionWorker::userTurnStarted, this, &MainWindow::onUserTurnStarted, Qt::QueuedConnection);
  connect(m_worker, &SessionWorker::answerReplayed, this, &MainWindow::onAnswerReplayed, Qt::QueuedConnection);
  connect(this, &MainWindow::requestEviction, m_worker, &SessionWorker::setEviction, Qt::QueuedConnection);
  connect(this, &MainWindow::requestThreads, m_worker, &SessionWorker::setThreads, Qt::QueuedConnection);
  connect(this, &MainWindow::requestWeights, m_worker, &SessionWorker::setWeights, Qt::QueuedConnection);
  connect(this, &MainWindow::requestKvDtype, m_worker, &SessionWorker::setKvDtype, Qt::QueuedConnection);
  connect(this, &MainWindow::requestDevice, m_worker, &SessionWorker::setDevice, Qt::QueuedConnection);
  connect(this, &MainWindow::requestImageSize, m_worker, &SessionWorker::setImageSize, Qt::QueuedConnection);
  connect(this, &MainWindow::requestGenerationParams, m_worker, &SessionWorker::setGenerationParams,
          Qt::QueuedConnection);
  // Results: values, queued onto the GUI thread.
  connect(m_worker, &SessionWorker::busyChanged, this, [this](bool busy) {
    m_busy = busy;
    if (!busy) m_loading = false;
    if (!busy && m_loadBar->isVisible()) {
      m_loadBar->setVisible(false);
      if (m_statusPhase->text().startsWith(tr("loading"))) m_statusPhase->setText(m_hasModel ? tr("ready") : tr("no model"));
    }
    updateButtons();
  }, Qt::QueuedConnection);
  connect(m_worker, &SessionWorker::modelLoading, this, [this](const QString& dir) {
    m_statusPhase->setText(tr("loading %1…").arg(QFileInfo(dir).fileName()));
    m_loadBar->setVisible(true);
    m_loading = true;
    updateButtons();
    Q_EMIT modelLoadStarted(dir);
  }, Qt::QueuedConnection);
  connect(this, &MainWindow::requestAutosaveFile, m_worker, &SessionWorker::setAutosaveFile, Qt::QueuedConnection);
  connect(m_worker, &SessionWorker::autosaved, this, &MainWindow::autosaved, Qt::QueuedConnection);
  connect(m_worker, &SessionWorker::modelLoaded, this, &MainWindow::onModelLoaded, Qt::QueuedConnection);
  connect(m_worker, &SessionWorker::modelLoadStopped, this, [this](const QString& dir) {
    m_statusPhase->setText(m_hasModel ? tr("Loading %1 stopped; the model in use stays.").arg(QFileInfo(dir).fileName())
                                      : tr("Loading %1 stopped; no model is open.").arg(QFileInfo(dir).fileName()));
    Q_EMIT modelLoadStopped(dir);
  }, Qt::QueuedConnection);
  connect(m_worker, &SessionWorker::textChunk, this, [this](const QString& chunk) {
    m_conversation->appendToAnswer(chunk);
  }, Qt::QueuedConnection);
  connect(m_worker, &SessionWorker::frameReady, this, &MainWindow::onFrame, Qt::QueuedConnection);
  connect(m_worker, &SessionWorker::turnFinished, this, &MainWindow::onTurnFinished, Qt::QueuedConnection);
  connect(m_worker, &SessionWorker::turnFailed, this, &MainWindow::onTurnFailed, Qt::QueuedConnection);
  connect(m_worker, &SessionWorker::evictionApplied, this, &MainWindow::onEvictionApplied, Qt::QueuedConnection);
  connect(m_worker, &SessionWorker::conversationReset, this, [this] {
    m_conversation->clearConversation();
    updateButtons();
  }, Qt::QueuedConnection);
  connect(m_worker, &SessionWorker::errorOccurred, this, &MainWindow::showError, Qt::QueuedConnection);
}

// --- settings ----------------------------------------------------------------------------------

namespace {
const QString kGeometryKey = QStringLiteral("window/geometry");
const QString kStateKey = QStringLiteral("window/state");
const QString kMainSplitKey = QStringLiteral("window/mainSplitter");
const QString kInspectorSplitKey = QStringLiteral("window/inspectorSplitter");
const QString kPolicyKey = QStringLiteral("eviction/policy");
const QString kBudgetKey = QStringLiteral("eviction/budgetPerHead");
const QString kSystemPromptKey = QStringLiteral("chat/systemPrompt");
const QString kBudgetUnitKey = QStringLiteral("eviction/budgetUnit");
const QString kPolicyOptionsKey = QStringLiteral("eviction/options");
const QString kThreadsKey = QStringLiteral("compute/threads");
const QString kWeightsKey = QStringLiteral("compute/weights");
const QString kKvDtypeKey = QStringLiteral("compute/kv_dtype");
const QString kDeviceKey = QStringLiteral("compute/device");
const QString kImageSizeKey = QStringLiteral("compute/image_size");
}  // namespace

void MainWindow::restoreSettings() {
  m_persist = true;
  QSettings s;
  restoreGeometry(s.value(kGeometryKey).toByteArray());
  restoreState(s.value(kStateKey).toByteArray());
  if (auto* split = findChild<QSplitter*>(QStringLiteral("mainSplitter"))) split->restoreState(s.value(kMainSplitKey).toByteArray());
  if (auto* split = findChild<QSplitter*>(QStringLiteral("inspectorSplitter")))
    split->restoreState(s.value(kInspectorSplitKey).toByteArray());
  m_systemPanel->setText(s.value(kSystemPromptKey).toString());
  syncSystemPrompt();
  if (s.contains(kThreadsKey) && m_threads == 0) setThreads(s.value(kThreadsKey).toInt());
  if (s.contains(kWeightsKey) && m_weights.isEmpty()) setWeights(s.value(kWeightsKey).toString());
  if (s.contains(kKvDtypeKey) && m_kvDtype.isEmpty()) setKvDtype(s.value(kKvDtypeKey).toString());
  if (s.contains(kDeviceKey) && m_device.isEmpty()) setDevice(s.value(kDeviceKey).toString());
  if (s.contains(kImageSizeKey) && m_imageSize == 0) setImageSize(s.value(kImageSizeKey).toInt());
  m_budgetFromSettings = s.contains(kBudgetKey);
  const int budget = s.value(kBudgetKey, kDefaultBudget).toInt();
  m_budget->setEntriesPerHead(budget);
  m_budgetUnit = static_cast<BudgetUnit>(s.value(kBudgetUnitKey, 0).toInt());
  const QString policy = s.value(kPolicyKey).toString();
  if (!policy.isEmpty()) {
    // The worker keeps it until a model loads and applies it then (an error names the problem).
    m_userChosePolicy = true;
    trimkv::EvictionSettings e;
    e.policy = policy.toStdString();
    for (const QString& item : s.value(kPolicyOptionsKey).toStringList()) e.options.push_back(item.toStdString());
    if (policy != QLatin1String("full")) e.budget_per_head = budget;
    Q_EMIT requestEviction(e);
  }
}

void MainWindow::saveSettings() const {
  QSettings s;
  s.setValue(kGeometryKey, saveGeometry());
  s.setValue(kStateKey, saveState());
  if (auto* split = findChild<QSplitter*>(QStringLiteral("mainSplitter"))) s.setValue(kMainSplitKey, split->saveState());
  if (auto* split = findChild<QSplitter*>(QStringLiteral("inspectorSplitter")))
    s.setValue(kInspectorSplitKey, split->saveState());
  s.setValue(kBudgetKey, static_cast<qlonglong>(m_budget->entriesPerHead()));
  s.setValue(kBudgetUnitKey, static_cast<int>(m_budget->unit()));
  s.setValue(kSystemPromptKey, m_systemPanel->text());
  if (m_userChosePolicy) {
    s.setValue(kPolicyKey, QString::fromStdString(m_eviction.policy));
    QStringList options;
    for (const std::string& item : m_eviction.options) options << QString::fromStdString(item);
    s.setValue(kPolicyOptionsKey, options);
  }
}

void MainWindow::closeEvent(QCloseEvent* event) {
  if (m_persist) saveSettings();
  m_draft->flush();
  if (m_compare) m_compare->close();
  if (m_evaluate) m_evaluate->close();
  QMainWindow::closeEvent(event);
}

void MainWindow::resizeEvent(QResizeEvent* event) {
  QMainWindow::resizeEvent(event);
  if (m_tour && m_tour->isVisible()) m_tour->reposition();
}

// --- requests ----------------------------------------------------------------------------------

bool MainWindow::analysisMayStart(const QString& title, bool otherRunning, const QString& busyTitle,
                                  const QString& busyText) {
  if (!m_hasModel) {
    showError(title, tr("No model is loaded: open a model folder first."));
    return false;
  }
  // One analysis job at a time: its progress and Cancel belong to one window.
  if (otherRunning) {
    showError(busyTitle, busyText);
    return false;
  }
  return true;
}

void MainWindow::openModel(const QString& dir, const QString& gates) { Q_EMIT requestLoad(dir, gates); }

void MainWindow::chooseGatesFile() {
  const QString file = QFileDialog::getOpenFileName(this, tr("Choose retention gates for %1").arg(m_model.dir),
                                                    m_model.dir, tr("Retention gates (*.safetensors *.pth)"));
  if (!file.isEmpty()) openModel(m_model.dir, file);
}

void MainWindow::sendTurn(const QString& text, const QStringList& images) {
  if (m_answering) return;  // one turn at a time; the input keeps the text
  syncSystemPrompt();
  m_answering = true;
  m_pendingText = text;
  m_pendingImages = images;
  // A fresh conversation starts with the system prompt the worker has (it adds it to the turn).
  if (m_conversation->messageCount() == 0 && !m_systemSent.isEmpty()) m_conversation->addSystemMessage(m_systemSent);
  noteDemoWorld(text);
  m_conversation->addUserMessage(text, images);
  m_conversation->beginAnswer();
  m_statusPhase->setText(images.isEmpty() ? tr("prefill…") : tr("encoding images and prefill…"));
  updateButtons();
  Q_EMIT requestTurn(text, images);
}

void MainWindow::regenerate() {
  if (m_answering || !m_hasModel || m_conversation->messageCount() == 0) return;
  cancelEdit();
  m_answering = true;
  m_regenerating = true;
  m_previousAnswer = m_conversation->endsWithAnswer() ? m_conversation->lastAnswer() : QString();
  m_conversation->dropLastAnswer();
  m_conversation->beginAnswer();
  m_statusPhase->setText(tr("replaying the conversation…"));
  updateButtons();
  Q_EMIT requestRegenerate();
}

void MainWindow::editUserTurn(int userTurn) {
  if (m_answering || userTurn < 0 || userTurn >= m_conversation->userMessageCount()) return;
  const ConversationView::Entry e = m_conversation->userMessage(userTurn);
  m_editTurn = userTurn;
  m_input->setPlainText(e.text);
  clearAttachments();
  addAttachments(e.images);
  m_input->setFocus();
  updateEditBanner();
}

void MainWindow::cancelEdit() {
  if (m_editTurn < 0) return;
  m_editTurn = -1;
  updateEditBanner();
}

void MainWindow::updateEditBanner() {
  m_editRow->setVisible(m_editTurn >= 0);
  if (m_editTurn >= 0)
    m_editBanner->setText(tr("<b>Editing message %1.</b> Send replaces it and everything after it; the "
                             "earlier turns are kept.").arg(m_editTurn + 1));
  m_send->setText(m_editTurn >= 0 ? tr("Resend") : tr("Send"));
}

void MainWindow::noteDemoWorld(const QString& text) {
  if (!m_demoWorld) return;
  // The demo model answers anything with its world's words: say so when a question is not about it.
  const bool inside = inDemoWorld(text);
  m_demoHint->setText(inside ? demoWorldHint() : outsideDemoWorldNote() + QStringLiteral("<br>") + demoWorldHint());
  if (!inside) statusBar()->showMessage(QTextDocumentFragment::fromHtml(outsideDemoWorldNote()).toPlainText(), 15000);
}

void MainWindow::resendUserTurn(int userTurn, const QString& text, const QStringList& images) {
  if (m_answering || !m_hasModel || userTurn < 0 || userTurn >= m_conversation->userMessageCount()) return;
  if (text.isEmpty() && images.isEmpty()) return;
  m_editTurn = -1;
  updateEditBanner();
  m_answering = true;
  m_rebuilding = true;
  m_viewBefore = m_conversation->entries();
  m_pendingText = text;
  m_pendingImages = images;
  m_conversation->truncateBeforeUserTurn(userTurn);
  noteDemoWorld(text);
  m_conversation->addUserMessage(text, images);
  m_conversation->beginAnswer();
  m_statusPhase->setText(tr("replaying the earlier turns…"));
  updateButtons();
  Q_EMIT requestResend(userTurn, text, images);
}

void MainWindow::replayConversation() {
  if (m_answering || !m_hasModel || m_conversation->userMessageCount() == 0) return;
  cancelEdit();
  m_answering = true;
  m_rebuilding = true;
  m_viewBefore = m_conversation->entries();
  m_statusPhase->setText(tr("replaying the conversation under %1…").arg(QString::fromStdString(m_eviction.policy)));
  updateButtons();
  Q_EMIT requestReplay();
}

void MainWindow::onReplayStarted(const QString& systemText) {
  m_conversation->clearConversation();
  if (!systemText.isEmpty()) m_conversation->addSystemMessage(systemText);
}

void MainWindow::onUserTurnStarted(const QString& text, const QStringList& images) {
  m_conversation->addUserMessage(text, images);
  m_conversation->beginAnswer();
}

void MainWindow::onAnswerReplayed(const TurnStats& stats) { m_conversation->finishAnswer(showTurnStats(stats)); }

void MainWindow::showImage(const QString& path) {
  auto* viewer = new ImageViewer(path, this);
  viewer->show();
}

void MainWindow::setSystemPrompt(const QString& text) {
  m_systemPanel->setText(text);
  syncSystemPrompt();
  updateButtons();
}

void MainWindow::syncSystemPrompt() {
  const QString text = m_systemPanel->text();
  if (text == m_systemSent) return;
  m_systemSent = text;
  Q_EMIT requestSystemPrompt(text);
}

void MainWindow::sendFromInput() {
  const QString text = m_input->toPlainText().trimmed();
  if (m_answering || (text.isEmpty() && m_attachments.isEmpty())) return;
  const QStringList images = m_attachments;
  const int edited = m_editTurn;
  m_input->clear();
  clearAttachments();
  if (edited >= 0) resendUserTurn(edited, text, images);
  else sendTurn(text, images);
}

void MainWindow::stopGeneration() {
  if (m_answering) m_worker->requestStop();  // atomic flag: takes effect at the next token
}

void MainWindow::stop() {
  if (m_answering || m_loading) m_worker->requestStop();  // a load stops before its next tensor
}

void MainWindow::newConversation() {
  stopGeneration();
  cancelEdit();
  syncSystemPrompt();
  Q_EMIT requestReset();
}

bool MainWindow::imageTabVisible() const { return m_lowerTabs->isTabVisible(m_lowerTabs->indexOf(m_overlay)); }

void MainWindow::editTemplateVariables() {
  bool ok = false;
  const QString template_file = m_model.chatTemplate.isEmpty() ? tr("this model has no chat template")
                                                                : m_model.chatTemplate;
  const QString text = QInputDialog::getMultiLineText(
      this, tr("Chat template variables"),
      tr("One NAME=VALUE per line; VALUE is read as JSON when it is one (true, 3, \"text\"), else as text.\n"
         "Template: %1\nA new conversation starts with them.").arg(template_file),
      templateVariables().join(QLatin1Char('\n')), &ok);
  if (ok) setTemplateVariables(text.split(QLatin1Char('\n'), Qt::SkipEmptyParts));
}

namespace {
// Template variables as the dialog shows them, one NAME=VALUE per line.
QStringList templateVarLines(const std::vector<trimkv::TemplateVar>& vars) {
  QStringList lines;
  for (const trimkv::TemplateVar& v : vars) lines << QString::fromStdString(v.name + "=" + v.value);
  return lines;
}
}  // namespace

QStringList MainWindow::templateVariables() const { return templateVarLines(m_templateVars); }

void MainWindow::setTemplateVariables(const QStringList& lines) {
  std::vector<trimkv::TemplateVar> vars;
  try {  // checked here, so the dialog never shows variables that are not in effect
    for (const QString& line : lines)
      if (!line.trimmed().isEmpty()) vars.push_back(trimkv::parse_template_var(line.toStdString()));
  } catch (const std::exception& e) {
    showError(tr("Cannot use these template variables"), QString::fromStdString(e.what()));
    return;
  }
  const QStringList wanted = templateVarLines(vars);
  if (wanted == templateVariables()) return;  // unchanged: the conversation stays
  stopGeneration();
  cancelEdit();
  m_templateVars = std::move(vars);
  Q_EMIT requestTemplateVariables(wanted);
}

void MainWindow::saveConversation(const QString& path) { Q_EMIT requestSave(path); }

void MainWindow::loadConversation(const QString& path) {
  if (m_answering) return;
  m_openingConversation = path;
  Q_EMIT requestOpen(path);
}

void MainWindow::chooseConversationToSave() {
  const QString path = QFileDialog::getSaveFileName(this, tr("Save the conversation"), tr("conversation.json"),
                                                    tr("Conversations (*.json)"));
  if (!path.isEmpty()) saveConversation(path);
}

void MainWindow::chooseConversationToOpen() {
  const QString path = QFileDialog::getOpenFileName(this, tr("Open a conversation"), QString(), tr("Conversations (*.json)"));
  if (!path.isEmpty()) loadConversation(path);
}

namespace {
QString autosaveFolder() {
  return QDir(QStandardPaths::writableLocation(QStandardPaths::AppDataLocation)).filePath(QStringLiteral("autosave"));
}
}  // namespace

QString MainWindow::defaultAutosaveFile() { return QDir(autosaveFolder()).filePath(QStringLiteral("conversation.json")); }

QString MainWindow::defaultDraftFile() { return QDir(autosaveFolder()).filePath(QStringLiteral("draft.json")); }

void MainWindow::setThreads(int threads) {
  m_threads = std::max(threads, 0);
  Q_EMIT requestThreads(m_threads);
}

int MainWindow::threadsInUse() const { return m_worker->threadsInUse(); }

QActionGroup* MainWindow::addReloadingChoiceMenu(QMenu* parent, const QString& title, const QString& menuName,
                                                const QString& prefix, const std::vector<MenuChoice>& choices,
                                                std::function<QString()> current,
                                                std::function<void(const QString&)> set, const QString& settingsKey) {
  QMenu* menu = parent->addMenu(title);
  menu->setObjectName(menuName);
  menu->setToolTipsVisible(true);
  auto* group = new QActionGroup(this);
  for (const MenuChoice& c : choices) {
    QAction* a = menu->addAction(c.label);
    a->setCheckable(true);
    a->setData(QString::fromLatin1(c.value));
    a->setToolTip(c.tip + tr(" (reloads the model)"));
    a->setObjectName(QStringLiteral("%1_%2").arg(prefix, c.value[0] ? QString::fromLatin1(c.value) : QStringLiteral("own")));
    group->addAction(a);
    a->setChecked(c.value[0] == 0);
  }
  connect(group, &QActionGroup::triggered, this, [this, current, set, settingsKey](QAction* a) {
    if (a->data().toString() == current()) return;
    set(a->data().toString());
    if (m_persist) QSettings().setValue(settingsKey, current());
    if (m_hasModel) openModel(m_model.dir, m_model.gates);
  });
  return group;
}

void MainWindow::setImageSize(int pixels) {
  m_imageSize = std::max(pixels, 0);
  const QString value = m_imageSize > 0 ? QString::number(m_imageSize) : QString();
  for (QAction* a : m_imageSizeGroup->actions()) a->setChecked(a->data().toString() == value);
  Q_EMIT requestImageSize(m_imageSize);
}

void MainWindow::setKvDtype(const QString& kvDtype) {
  m_kvDtype = kvDtype;
  for (QAction* a : m_kvDtypeGroup->actions()) a->setChecked(a->data().toString() == kvDtype);
  Q_EMIT requestKvDtype(m_kvDtype);
}

void MainWindow::setDevice(const QString& device) {
  m_device = device;
  for (QAction* a : m_deviceGroup->actions()) a->setChecked(a->data().toString() == device);
  Q_EMIT requestDevice(m_device);
}

void MainWindow::setWeights(const QString& weights) {
  m_weights = weights;
  for (QAction* a : m_weightsGroup->actions()) a->setChecked(a->data().toString() == weights);
  Q_EMIT requestWeights(m_weights);
}

void MainWindow::setStartBudget(int entriesPerHead) {
  m_budget->setEntriesPerHead(entriesPerHead);
  m_budgetFromSettings = true;  // as if the user had chosen it
}

void MainWindow::editThreads() {
  bool ok = false;
  const int cores = std::max(1, QThread::idealThreadCount());
  const int n = QInputDialog::getInt(this, tr("CPU threads"),
                                     tr("Threads for the model's math (this machine has %1; 0 = all of them):").arg(cores),
                                     m_threads, 0, 4 * cores, 1, &ok);
  if (!ok) return;
  setThreads(n);
  if (m_persist) QSettings().setValue(kThreadsKey, m_threads);
  statusBar()->showMessage(tr("Computing with %1 threads").arg(n > 0 ? n : cores), 4000);
}

void MainWindow::setAutosaveFile(const QString& path) {
  m_autosaveFile = path;
  m_conversationList->setAutosaveFile(path);
  Q_EMIT requestAutosaveFile(path);
}

void MainWindow::setDraftFile(const QString& path) { m_draft->setFile(path); }

bool MainWindow::restoreDraft() {
  if (!m_input->toPlainText().isEmpty() || !m_attachments.isEmpty()) return false;
  const DraftKeeper::Draft d = m_draft->load();
  if (d.text.isEmpty() && d.images.isEmpty()) return false;
  m_input->setPlainText(d.text);
  // A text model takes no images: the text alone comes back, without addAttachments' error dialog.
  if (!textOnlyModel()) addAttachments(d.images);
  m_input->moveCursor(QTextCursor::End);
  return true;
}

void MainWindow::offerAutosaveRestore() {
  if (m_autosaveFile.isEmpty() || !QFileInfo::exists(m_autosaveFile)) return;
  int messages = 0;
  try {
    messages = static_cast<int>(loadConversationFile(m_autosaveFile).size());
  } catch (const std::exception&) {
    return;  // not a conversation (any more): nothing to offer
  }
  if (messages == 0) return;
  auto* box = new QMessageBox(QMessageBox::Question, tr("Restore the last conversation?"),
                              tr("The last conversation (%1 messages, autosaved %2) can be opened again. "
                                 "Open it? It is replayed under the current settings.")
                                  .arg(messages)
                                  .arg(QLocale().toString(QFileInfo(m_autosaveFile).lastModified(), QLocale::ShortFormat)),
                              QMessageBox::Open | QMessageBox::Discard, this);
  box->setObjectName(QStringLiteral("restoreDialog"));
  box->setAttribute(Qt::WA_DeleteOnClose);
  box->setDefaultButton(QMessageBox::Open);
  // Until the user decides, turns are not autosaved: the file on offer must not be replaced.
  Q_EMIT requestAutosaveFile(QString());
  connect(box, &QMessageBox::finished, this, [this](int result) {
    if (result == QMessageBox::Open) loadConversation(m_autosaveFile);
    Q_EMIT requestAutosaveFile(m_autosaveFile);
  });
  box->open();
}

bool MainWindow::tryExport(const QString& title, const std::function<void()>& write) {
  try {
    write();
  } catch (const std::exception& e) {
    showError(title, QString::fromStdString(e.what()));
    return false;
  }
  return true;
}

bool MainWindow::exportFigureTo(Figure figure, const QString& path) {
  QWidget* widget = figure == Figure::HeadGrid ? static_cast<QWidget*>(m_grid)
                    : figure == Figure::ImageOverlay ? static_cast<QWidget*>(m_overlay)
                                                      : static_cast<QWidget*>(m_timeline);
  const QString title = figure == Figure::HeadGrid ? tr("KV entries kept per layer and KV head")
                        : figure == Figure::ImageOverlay ? tr("Kept image patches")
                                                          : tr("KV entries over forward steps");
  // A figure on a hidden tab has no size yet: show it first.
  if (figure != Figure::HeadGrid) m_lowerTabs->setCurrentWidget(widget);
  const bool ok = tryExport(tr("Cannot export the figure"), [&] { exportFigure(widget, path, title); });
  if (ok) statusBar()->showMessage(tr("Exported %1").arg(path), 5000);
  return ok;
}

bool MainWindow::exportTraceTo(const QString& path) {
  const bool ok = tryExport(tr("Cannot export the eviction trace"), [&] {
    TRIMKV_CHECK(m_lastTrace, Input, "there is no eviction trace yet: send a message first");
    exportTrace(*m_lastTrace, path);
  });
  if (ok) statusBar()->showMessage(tr("Exported %1").arg(path), 5000);
  return ok;
}

bool MainWindow::exportHeadCountsTo(const QString& path) {
  const bool ok = tryExport(tr("Cannot export the per-head counts"), [&] {
    TRIMKV_CHECK(m_shownFrame.kv, Input, "there is no KV cache to count yet: open a model first");
    exportHeadCounts(*m_shownFrame.kv, path);  // what the grid shows (a past step when scrubbing)
  });
  if (ok) statusBar()->showMessage(tr("Exported %1").arg(path), 5000);
  return ok;
}

void MainWindow::chooseExport(Figure figure) {
  const QString name = figure == Figure::HeadGrid ? QStringLiteral("head-grid.svg")
                       : figure == Figure::ImageOverlay ? QStringLiteral("image-overlay.svg")
                                                         : QStringLiteral("timeline.svg");
  const QString path = QFileDialog::getSaveFileName(this, tr("Export the figure"), name,
                                                    tr("SVG (*.svg);;PNG (*.png)"));
  if (!path.isEmpty()) exportFigureTo(figure, path);
}

void MainWindow::chooseDataExport(bool trace) {
  const QString path =
      trace ? QFileDialog::getSaveFileName(this, tr("Export the eviction trace"), QStringLiteral("trace.json"),
                                           tr("JSON (*.json)"))
            : QFileDialog::getSaveFileName(this, tr("Export the per-head counts"), QStringLiteral("head-counts.csv"),
                                           tr("CSV (*.csv)"));
  if (path.isEmpty()) return;
  if (trace) exportTraceTo(path);
  else exportHeadCountsTo(path);
}

void MainWindow::onConversationLoaded(const std::vector<trimkv::Message>& messages) {
  if (m_persist && !m_openingConversation.isEmpty()) m_conversationList->addRecent(m_openingConversation);
  m_openingConversation.clear();
  cancelEdit();
  m_conversation->clearConversation();
  for (const trimkv::Message& m : messages) {
    const DisplayMessage d = displayMessage(m);
    if (d.role == QLatin1String("system")) {
      m_conversation->addSystemMessage(d.text);
    } else if (d.role == QLatin1String("user")) {
      m_conversation->addUserMessage(d.text, d.images);
    } else {
      m_conversation->beginAnswer();
      m_conversation->appendToAnswer(d.text);
      m_conversation->finishAnswer(QString());
    }
  }
  updateButtons();
  Q_EMIT conversationLoaded(static_cast<int>(messages.size()));
}

void MainWindow::setGenerationParams(const trimkv::GenerationParams& params) {
  m_generation->setParams(params);
  Q_EMIT requestGenerationParams(params);
}

void MainWindow::chooseModelFolder() {
  const QString dir = QFileDialog::getExistingDirectory(this, tr("Open a model folder"), m_model.dir);
  if (!dir.isEmpty()) openModel(dir);
}

void MainWindow::chooseGgufFile() {
  const QString file = QFileDialog::getOpenFileName(this, tr("Open a GGUF model"), QFileInfo(m_model.dir).absolutePath(),
                                                    tr("GGUF models (*.gguf);;All files (*)"));
  if (!file.isEmpty()) openModel(file);
}

void MainWindow::attachImages() {
  const QStringList paths = QFileDialog::getOpenFileNames(this, tr("Attach images"), QString(),
                                                          tr("Images (*.png *.jpg *.jpeg *.bmp *.gif)"));
  addAttachments(paths);
}

void MainWindow::addAttachments(const QStringList& paths) {
  if (!paths.isEmpty() && textOnlyModel()) {
    showError(tr("This model takes no images"),
              tr("%1 is a text model: its messages are text only.").arg(QFileInfo(m_model.dir).fileName()));
    return;
  }
  for (const QString& p : paths)
    if (!m_attachments.contains(p)) m_attachments << p;
  // Each image with the tokens it will take at this model's resolution (from its size alone).
  QStringList names;
  int64_t total = 0;
  for (const QString& p : m_attachments) {
    const QSize size = QImageReader(p).size();
    int64_t tokens = -1;
    if (size.isValid() && m_model.imageTokens) {
      try {
        tokens = m_model.imageTokens(size.width(), size.height());
      } catch (const std::exception&) {
        tokens = -1;  // an image the processor refuses: named when sent
      }
    }
    names << (tokens >= 0 ? tr("%1 (%2 tokens)").arg(QFileInfo(p).fileName()).arg(tokens) : QFileInfo(p).fileName());
    total += std::max<int64_t>(tokens, 0);
  }
  m_attachLabel->setText(m_attachments.isEmpty() ? QString()
                                                  : tr("Images: %1 · %2 image tokens").arg(names.join(QStringLiteral(", "))).arg(total));
  m_attachLabel->setToolTip(m_attachments.join(QLatin1Char('\n')));
  m_clearAttach->setVisible(!m_attachments.isEmpty());
  if (m_draft) m_draft->changed();
}

void MainWindow::clearAttachments() {
  m_attachments.clear();
  addAttachments({});
}

void MainWindow::scheduleEvictionChange() { m_evictionDebounce->start(); }

void MainWindow::applyEvictionFromControls() {
  m_evictionDebounce->stop();
  trimkv::EvictionSettings s;
  s.policy = m_policy->currentData().toString().toStdString();
  if (s.policy.empty()) return;
  if (policyUsesBudget(s.policy)) s.budget_per_head = m_budget->entriesPerHead();
  if (m_policyOptions->policy() == s.policy) s.options = m_policyOptions->options();
  Q_EMIT requestEviction(s);
}

void MainWindow::showError(const QString& title, const QString& message) {
  Q_EMIT errorReported(title, message);
  if (!m_errorDialogs) return;
  // Non-modal so that nothing (a test, the screenshot mode, a stream in flight) blocks on it.
  auto* box = new QMessageBox(QMessageBox::Warning, title, message, QMessageBox::Ok, this);
  box->setObjectName(QStringLiteral("errorDialog"));
  box->setAttribute(Qt::WA_DeleteOnClose);
  box->open();
}

// --- results -----------------------------------------------------------------------------------

void MainWindow::onModelLoaded(const ModelSummary& model) {
  m_model = model;
  m_hasModel = true;
  m_demoWorld = isDemoWorldModel(model.dir);
  m_demoHint->setText(demoWorldHint());
  m_demoHint->setVisible(m_demoWorld);
  addAttachments({});  // the attached images' token counts at this model's resolution
  m_conversation->setAnswersOpenThinking(model.opensThinking);
  if (m_persist) RecentModels::add(model.dir);
  const trimkv::ModelInfo& i = model.info;
  QString builtIn;
  try {
    if (QFileInfo(QString::fromStdString(trimkv::default_model_dir())) == QFileInfo(model.dir)) builtIn = tr(" (built-in)");
  } catch (const std::exception&) {
    // No default model: this one is not it.
  }
  m_modelLabel->setText(tr("Model: <b>%1</b>%2 · %3 · KV %4%5")
                            .arg(QFileInfo(model.dir).fileName(), builtIn, QString::fromStdString(i.weights_held),
                                 QString::fromStdString(i.kv_dtype),
                                 i.device == "cpu" ? QString() : tr(" · %1").arg(QString::fromStdString(i.device))));
  m_modelLabel->setToolTip(tr("%1\n%2 (%3), %4 layers × %5 KV heads, %6 M parameters held as %8 (%9 MiB)%7")
                               .arg(model.dir, QString::fromStdString(i.architecture),
                                    QString::fromStdString(i.family))
                               .arg(i.n_layer)
                               .arg(i.n_kv_head)
                               .arg(static_cast<double>(i.parameters) / 1e6, 0, 'f', 1)
                               .arg(i.gates_file.empty() ? tr(", no retention gates")
                                                         : tr(", gates: %1").arg(QString::fromStdString(i.gates_kind)))
                               .arg(QString::fromStdString(i.weights_held))
                               .arg(static_cast<double>(i.weights_held_bytes) / 1048576.0, 0, 'f', 1) +
                           tr("\nKV cache: %1, %2 bytes per token").arg(QString::fromStdString(i.kv_dtype)).arg(i.kv_bytes_per_token) +
                           (model.vision.takes_images() ? QString() : tr("\ntext model (no images)")) +
                           tr("\nchat template: %1").arg(model.chatTemplate.isEmpty() ? tr("none") : model.chatTemplate) +
                           (i.weight_cache.empty() ? QString() : tr("\nweight cache: %1").arg(QString::fromStdString(i.weight_cache))));
  if (!i.weight_cache.empty()) statusBar()->showMessage(QString::fromStdString(i.weight_cache), 8000);
  m_policy->blockSignals(true);
  m_policy->clear();
  for (const auto& d : model.policies) {
    QString label = QString::fromStdString(d.name);
    if (d.needs_gates && i.gates_file.empty()) label += tr(" (needs gates)");
    m_policy->addItem(label, QString::fromStdString(d.name));
    m_policy->setItemData(m_policy->count() - 1, QString::fromStdString(d.summary), Qt::ToolTipRole);
  }
  m_policy->blockSignals(false);
  m_conversation->clearConversation();
  // A text model: no images to attach or overlay (the grid and strip show its text entries).
  const bool images = model.vision.takes_images();
  if (!images) clearAttachments();
  m_attach->setEnabled(images);
  m_attach->setToolTip(images ? tr("Attach images to the next message (or drop them onto the input)")
                              : tr("This is a text model: it takes no images"));
  m_lowerTabs->setTabVisible(m_lowerTabs->indexOf(m_overlay), images);
  m_input->setPlaceholderText(images ? tr("Type a message… (Ctrl+Return sends; drop or paste images here)")
                                     : tr("Type a message… (Ctrl+Return sends)"));
  m_conversation->setPlaceholderText(images ? tr("Ask about an image: attach one (Attach image…, drag and drop or "
                                                 "paste) and type a question.")
                                            : tr("Type a message below: this is a text model (no images)."));
  m_statusPhase->setText(tr("ready"));
  m_compare->setPolicies(model.policies);
  m_evaluate->setPolicies(model.policies, QString::fromStdString(m_eviction.policy));
  updateButtons();
  // Queued before anything a modelLoaded listener sends, so the first turn runs under it. Gates
  // trained for a budget start at that budget (what they were made for).
  if (!m_userChosePolicy) {
    if (i.gates_train_budget > 0 && !m_budgetFromSettings) m_budget->setEntriesPerHead(i.gates_train_budget);
    Q_EMIT requestEviction(defaultEviction(i, m_budget->entriesPerHead()));
  }
  Q_EMIT modelLoaded(model);
}

void MainWindow::onEvictionApplied(const trimkv::EvictionSettings& settings) {
  m_eviction = settings;
  const int idx = m_policy->findData(QString::fromStdString(settings.policy));
  m_policy->blockSignals(true);
  if (idx >= 0) m_policy->setCurrentIndex(idx);
  m_policy->blockSignals(false);
  if (!m_evictionDebounce->isActive()) {
    if (settings.budget_per_head) m_budget->setEntriesPerHead(*settings.budget_per_head);
    showPolicyOptions(settings.policy, settings.options);
  }
  updateBudgetHint();
  Q_EMIT evictionApplied(settings);
}

void MainWindow::showFrame(const InspectorFrame& frame) {
  m_shownFrame = frame;
  m_grid->setSnapshot(frame.kv, frame.tokens.get());
  m_strip->setFrame(frame.kv, frame.tokens);
  m_strip->setHead(m_grid->selectedLayer(), m_grid->selectedHead());
  m_overlay->setFrame(frame.state.images, frame.kv, frame.tokens);
  m_overlay->setHead(m_grid->selectedLayer(), m_grid->selectedHead());
  onHeadSelected(m_grid->selectedLayer(), m_grid->selectedHead());
}

void MainWindow::scrubTo(int index) {
  if (m_history.empty()) return;
  index = std::clamp(index, 0, m_history.size() - 1);
  m_scrubbing = index < m_history.size() - 1;
  showFrame(m_scrubbing ? m_history.at(index) : m_lastFrame);
  updateScrubber();
}

void MainWindow::updateScrubber() {
  const int last = std::max(0, m_history.size() - 1);
  // While live the slider follows the newest frame; while scrubbing it stays on the frame shown.
  int index = last;
  if (m_scrubbing) {
    index = -1;
    for (int i = 0; i < m_history.size(); ++i)
      if (m_history.at(i).kv == m_shownFrame.kv) index = i;
    if (index < 0) {  // it left the ring (or the history restarted): live again
      m_scrubbing = false;
      showFrame(m_lastFrame);
      index = last;
    }
  }
  {
    const QSignalBlocker block(m_scrubber);
    m_scrubber->setRange(0, last);
    m_scrubber->setValue(index);
  }
  m_scrubber->setEnabled(m_history.size() > 1);
  m_liveButton->setEnabled(m_scrubbing);
  if (m_scrubbing && m_shownFrame.kv) {
    m_scrubLabel->setText(tr("step %1 of %2 (%3 tokens)")
                              .arg(m_shownFrame.kv->step)
                              .arg(m_lastFrame.kv ? m_lastFrame.kv->step : 0)
                              .arg(m_shownFrame.kv->n_tokens));
    m_timeline->setMarker(m_shownFrame.kv->step);
  } else {
    m_scrubLabel->setText(tr("live · %1 stops").arg(m_history.size()));
    m_timeline->setMarker(-1);
  }
}

void MainWindow::onFrame(const InspectorFrame& frame) {
  m_lastFrame = frame;
  if (frame.trace) m_lastTrace = frame.trace;
  m_history.add(frame);
  if (!m_scrubbing) showFrame(frame);
  m_timeline->setTrace(frame.trace, frame.kv->step, frame.state.kv_entries);
  updateScrubber();

  const auto& st = frame.state;
  const int64_t perToken = m_model.info.kv_bytes_per_token;
  const int64_t heads = static_cast<int64_t>(frame.kv->geometry.n_layer) * frame.kv->geometry.n_kv_head;
  m_statusKv->setText(tr("· KV %1 / %2 entries · %3 / %4")
                          .arg(grouped(st.kv_entries), grouped(st.tokens * heads), bytesText(st.kv_bytes),
                               bytesText(st.tokens * perToken)));
  if (frame.phase == QLatin1String("decode"))
    m_statusTokens->setText(tr("generating: %1 tokens").arg(frame.generatedTokens));
  QString phase = QString::fromStdString(st.policy);
  if (st.policy != "full")
    phase += tr(" · step %1 · %2").arg(frame.kv->step).arg(st.eviction_events == 1 ? tr("1 eviction")
                                                                                : tr("%1 evictions").arg(st.eviction_events));
  phase += QStringLiteral(" · ") + (frame.phase == QLatin1String("idle") ? tr("idle") : frame.phase);
  m_statusPhase->setText(phase);
  updateBudgetHint();
  Q_EMIT frameShown(frame);
}

QString MainWindow::showTurnStats(const TurnStats& stats) {
  m_statusTokens->setText(tr("prompt %1 · generated %2 tokens").arg(grouped(stats.promptTokens), grouped(stats.generatedTokens)));
  m_statusSpeed->setText(tr("· first token %1 s · %2 tok/s")
                             .arg(stats.timeToFirstTokenMs / 1000.0, 0, 'f', 2)
                             .arg(stats.tokensPerSecond, 0, 'f', 1));
  return stats.stopReason == QLatin1String("cancelled")      ? tr("stopped")
         : stats.stopReason == QLatin1String("max_tokens")   ? tr("reached the token limit")
         : stats.stopReason == QLatin1String("context_full") ? tr("the context is full")
                                                             : QString();
}

void MainWindow::onTurnFinished(const TurnStats& stats) {
  m_answering = false;
  m_regenerating = false;
  m_rebuilding = false;
  m_viewBefore.clear();
  m_conversation->finishAnswer(showTurnStats(stats));
  updateButtons();
  Q_EMIT answerFinished(stats);
}

void MainWindow::onTurnFailed(const QString& message) {
  m_answering = false;
  if (m_rebuilding) {
    // The worker restored the conversation as it was: so does the view. An edited message goes
    // back into the input, to try again.
    m_rebuilding = false;
    m_conversation->setEntries(m_viewBefore);
    m_viewBefore.clear();
  } else if (m_regenerating) {
    // The worker restored the conversation as it was: so does the view.
    m_regenerating = false;
    m_conversation->dropLastAnswer();
    if (!m_previousAnswer.isEmpty()) {
      m_conversation->beginAnswer();
      m_conversation->appendToAnswer(m_previousAnswer);
      m_conversation->finishAnswer(QString());
    }
  } else {
    // The engine kept nothing of the turn: take it off the view and give the text back.
    m_conversation->dropLastTurn();
    if (m_input->toPlainText().isEmpty()) m_input->setPlainText(m_pendingText);
    if (m_attachments.isEmpty()) addAttachments(m_pendingImages);
  }
  m_statusPhase->setText(message);
  updateButtons();
  Q_EMIT turnFailed(message);
}

void MainWindow::onHeadSelected(int layer, int head) {
  m_strip->setHead(layer, head);
  m_overlay->setHead(layer, head);
  const int kept = m_strip->keptCount();
  const int64_t n = m_shownFrame.kv ? m_shownFrame.kv->n_tokens : 0;
  if (m_allHeads->isChecked()) {
    m_headLabel->setText(tr("<b>All heads</b>: %1 of %2 positions kept by at least one head "
                            "(brighter: kept by more heads; hover for counts)").arg(kept).arg(n));
    return;
  }
  m_headLabel->setText(tr("<b>Layer %1, KV head %2</b>: keeps %3 of %4 positions "
                          "(bright: kept, faded: evicted; hover for details)")
                           .arg(layer).arg(head).arg(kept).arg(n));
}

bool MainWindow::policyUsesBudget(const std::string& policy) const {
  if (policy == "full") return false;
  for (const auto& d : m_model.policies)
    if (d.name == policy) return d.uses_budget;
  return true;
}

void MainWindow::updateButtons() {
  m_send->setEnabled(m_hasModel && !m_answering);
  if (m_compareAction) m_compareAction->setEnabled(m_hasModel);
  // The mini evaluation asks questions about generated pictures: vision-language models only.
  if (m_evaluateAction) m_evaluateAction->setEnabled(m_hasModel && m_model.vision.takes_images());
  if (m_templateVarsAction) m_templateVarsAction->setEnabled(m_hasModel && !m_answering);
  m_stop->setEnabled(m_answering || m_loading);
  m_regenerateAction->setEnabled(m_hasModel && !m_answering && m_conversation->messageCount() > 0);
  m_replayAction->setEnabled(m_hasModel && !m_answering && m_conversation->userMessageCount() > 0);
  m_conversation->setEditingEnabled(m_hasModel && !m_answering);
  const QString inUse = m_conversation->hasSystemMessage() ? m_conversation->entries().front().text : QString();
  m_systemPanel->setConversationState(m_conversation->messageCount() > 0, inUse);
}

void MainWindow::updateBudgetHint() {
  const int64_t maxEntries = std::max<int64_t>(m_model.info.max_position_embeddings, 2);
  m_budget->setScale(BudgetScale::of(m_model.info, m_lastFrame.kv.get()), maxEntries);
  if (m_budgetUnit) {  // a unit restored from the settings, once the model makes it usable
    m_budget->setUnit(*m_budgetUnit);
    if (m_budget->unit() == *m_budgetUnit) m_budgetUnit.reset();
  }
  if (!m_hasModel) m_budget->setInactiveText(QString());
  else if (m_eviction.policy == "full") m_budget->setInactiveText(tr("(full cache: no budget)"));
  else if (!policyUsesBudget(m_eviction.policy)) m_budget->setInactiveText(tr("(this policy takes no budget)"));
  else m_budget->setInactiveText(QString());
  // The budget's explanation with this model's numbers.
  const int64_t m = m_budget->entriesPerHead();
  const int64_t l = m_model.info.n_layer, h = m_model.info.n_kv_head;
  QString text = tr("<b>Budget M</b>: how many KV entries each KV head of each layer may keep. One entry is one "
                    "token's key and value in one layer and one KV head; text, image and special tokens all count. "
                    "Policies that share one budget over the whole model (DBTrimKV) get "
                    "<b>M_global = M·L·H_kv</b>, so every policy is compared at the same memory.");
  if (m_hasModel)
    text += tr("<br>This model: L = %1 layers, H_kv = %2 KV heads, so M = %3 gives M_global = %4 entries.")
                .arg(l).arg(h).arg(m).arg(m * l * h);
  m_budget->setWhatsThis(text);
  m_budget->setToolTip(text);
}

void MainWindow::showPolicyOptions(const std::string& policy, const std::vector<std::string>& options) {
  if (m_policyOptions->policy() != policy) {
    for (const trimkv::PolicyDescription& d : m_model.policies)
      if (d.name == policy) m_policyOptions->setPolicy(d);
  }
  m_policyOptions->setOptions(options);
  m_optionsButton->setEnabled(!m_policyOptions->optionNames().isEmpty());
  m_optionsButton->setToolTip(m_policyOptions->optionNames().isEmpty()
                                  ? tr("%1 has no options").arg(QString::fromStdString(policy))
                                  : tr("Options of %1: %2").arg(QString::fromStdString(policy),
                                                                m_policyOptions->optionNames().join(QStringLiteral(", "))));
}

// --- Compare and Evaluate ----------------------------------------------------------------------

void MainWindow::buildAnalysis() {
  registerAnalysisTypes();
  m_analysis = new AnalysisWorker;
  m_analysis->moveToThread(&m_analysisThread);
  connect(&m_analysisThread, &QThread::finished, m_analysis, &QObject::deleteLater);
  m_analysisThread.setObjectName(QStringLiteral("AnalysisWorker"));

  m_compare = new CompareWindow(this);
  m_evaluate = new EvaluateWindow(this);
  connect(this, &MainWindow::requestTranscript, m_worker, &SessionWorker::provideTranscript, Qt::QueuedConnection);
  connect(m_worker, &SessionWorker::transcriptProvided, this, &MainWindow::onTranscriptForCompare,
          Qt::QueuedConnection);
  connect(this, &MainWindow::requestCompare, m_analysis, &AnalysisWorker::runCompare, Qt::QueuedConnection);
  connect(this, &MainWindow::requestEvaluation, m_analysis, &AnalysisWorker::runEvaluation, Qt::QueuedConnection);
  connect(this, &MainWindow::requestReleaseAnalysisEngine, m_analysis, &AnalysisWorker::releaseEngine,
          Qt::QueuedConnection);
  m_compare->installEventFilter(this);
  m_evaluate->installEventFilter(this);

  connect(m_compare, &CompareWindow::runRequested, this,
          [this](const trimkv::EvictionSettings& a, const trimkv::EvictionSettings& b) {
            if (!analysisMayStart(tr("Cannot compare"), m_evaluate->isRunning(), tr("Cannot compare now"),
                                  tr("The mini evaluation is running: wait for it or cancel it, then run the "
                                     "comparison."))) {
              m_compare->onFinished(true);
              return;
            }
            m_compareSides[0] = a;
            m_compareSides[1] = b;
            m_comparePending = true;
            Q_EMIT requestTranscript();  // after the chat's requests before it: the conversation as shown
          });
  connect(m_compare, &CompareWindow::cancelRequested, this, [this] {
    if (m_comparePending) {  // not started yet
      m_comparePending = false;
      m_compare->onFinished(true);
      return;
    }
    m_analysis->requestStop();
  });
  connect(m_evaluate, &EvaluateWindow::runRequested, this, [this](EvalRequest request) {
    if (!analysisMayStart(tr("Cannot evaluate"), m_compare->isRunning(), tr("Cannot evaluate now"),
                          tr("A comparison is running: wait for it or cancel it, then run the evaluation."))) {
      m_evaluate->onFinished(true);
      return;
    }
    request.modelDir = m_model.dir;
    request.gates = m_model.gates;
    request.params.max_new_tokens = 8;  // the answers are one or two words (as `trimkv eval`)
    m_analysis->arm();
    Q_EMIT requestEvaluation(request);
  });
  connect(m_evaluate, &EvaluateWindow::cancelRequested, this, [this] { m_analysis->requestStop(); });
  connect(m_evaluate, &EvaluateWindow::errorOccurred, this, &MainWindow::showError);

  // Results: each window takes what belongs to its own run (it ignores the rest).
  connect(m_analysis, &AnalysisWorker::progress, m_compare, &CompareWindow::onProgress, Qt::QueuedConnection);
  connect(m_analysis, &AnalysisWorker::progress, m_evaluate, &EvaluateWindow::onProgress, Qt::QueuedConnection);
  connect(m_analysis, &AnalysisWorker::compareAnswer, m_compare, &CompareWindow::onAnswer, Qt::QueuedConnection);
  connect(m_analysis, &AnalysisWorker::compareFrame, m_compare, &CompareWindow::onFrame, Qt::QueuedConnection);
  connect(m_analysis, &AnalysisWorker::compareFinished, m_compare, &CompareWindow::onFinished, Qt::QueuedConnection);
  connect(m_analysis, &AnalysisWorker::evalCell, m_evaluate, &EvaluateWindow::onCell, Qt::QueuedConnection);
  connect(m_analysis, &AnalysisWorker::evalFinished, m_evaluate, &EvaluateWindow::onFinished, Qt::QueuedConnection);
  connect(m_analysis, &AnalysisWorker::failed, this, &MainWindow::showError, Qt::QueuedConnection);
}

bool MainWindow::eventFilter(QObject* watched, QEvent* event) {
  if (event->type() == QEvent::Hide && (watched == m_compare || watched == m_evaluate)) {
    // A closed window's job would run unseen: stop it. With neither window open, the second copy
    // of the model goes (queued after the job's end); the next job loads it again.
    if (watched == m_compare && m_compare->isRunning()) m_compare->cancel();
    if (watched == m_evaluate && m_evaluate->isRunning()) m_evaluate->cancel();
    const bool compareShown = watched != m_compare && m_compare->isVisible();  // (the one hiding may still say visible)
    const bool evaluateShown = watched != m_evaluate && m_evaluate->isVisible();
    if (!compareShown && !evaluateShown) Q_EMIT requestReleaseAnalysisEngine();
  }
  return QMainWindow::eventFilter(watched, event);
}

void MainWindow::onTranscriptForCompare(const std::vector<trimkv::Message>& messages) {
  if (!m_comparePending) return;
  m_comparePending = false;
  CompareRequest request;
  request.modelDir = m_model.dir;
  request.gates = m_model.gates;
  request.templateVars = m_templateVars;
  request.messages = messages;
  request.sides[0] = m_compareSides[0];
  request.sides[1] = m_compareSides[1];
  request.params = m_generation->params();
  m_analysis->arm();
  Q_EMIT requestCompare(request);
}

void MainWindow::openCompare() {
  if (!m_compare->isRunning()) {
    // A: the full cache; B: what the chat runs under now (or h2o at the toolbar's budget).
    trimkv::EvictionSettings a;
    a.policy = "full";
    trimkv::EvictionSettings b = m_eviction;
    if (b.policy == "full") b.policy = "h2o";
    if (!b.budget_per_head) b.budget_per_head = m_budget->entriesPerHead();
    m_compare->setSide(0, a);
    m_compare->setSide(1, b);
  }
  m_compare->show();
  m_compare->raise();
  m_compare->activateWindow();
}

void MainWindow::openEvaluate() {
  m_evaluate->show();
  m_evaluate->raise();
  m_evaluate->activateWindow();
}

// --- the conversation list ---------------------------------------------------------------------

void MainWindow::buildConversationList() {
  m_conversationDock = new QDockWidget(tr("Conversations"), this);
  m_conversationDock->setObjectName(QStringLiteral("conversationDock"));
  m_conversationList = new ConversationList(m_conversationDock);
  m_conversationDock->setWidget(m_conversationList);
  addDockWidget(Qt::LeftDockWidgetArea, m_conversationDock);
  m_conversationDock->setMinimumWidth(170);
  resizeDocks({m_conversationDock}, {190}, Qt::Horizontal);
  connect(m_conversationList, &ConversationList::openRequested, this, &MainWindow::loadConversation);
  connect(m_worker, &SessionWorker::autosaved, m_conversationList, &ConversationList::refresh, Qt::QueuedConnection);
  auto* view = new QMenu(tr("&View"), this);
  view->addAction(m_conversationDock->toggleViewAction());
  if (auto* help = findChild<QMenu*>(QStringLiteral("helpMenu"))) menuBar()->insertMenu(help->menuAction(), view);
  else menuBar()->addMenu(view);
}

// --- teaching ----------------------------------------------------------------------------------

void MainWindow::explainTerms() {
  m_policy->setWhatsThis(
      tr("<b>Eviction policy</b>: decides which KV entries to drop when the cache is over the budget. "
         "<b>dbtrimkv / trimkv</b> use the model's retention gates: every entry gets a keep factor "
         "<b>β</b> in (0, 1] when it is written; its importance decays as β<sup>age</sup>, and the entries with the "
         "lowest decayed importance go first (β = 1: never forgotten). <b>h2o</b>, <b>snapkv</b>, … score "
         "entries by the attention they received; <b>full</b> keeps everything."));
  m_shade->setWhatsThis(
      tr("<b>β</b> is the retention gate's keep factor of an entry, learned per token, layer and KV head: the entry's "
         "importance is multiplied by β at every later step. The band under each kept position shows β (or the "
         "policy's score) from dark violet (low) to yellow (high)."));
  m_grid->setWhatsThis(
      tr("<b>The grid</b>: one row per layer, one cell per KV head. The bar in a cell is how many entries that head "
         "keeps, relative to the fullest head; its colours split it by what the entries are: <span "
         "style='color:%1'>■ text</span>, <span style='color:%2'>■ image</span>, <span style='color:%3'>■ "
         "special</span> tokens. Under a per-head budget M no cell holds more than M (plus slack between "
         "compressions). Click a cell to see that head below.")
          .arg(ModalityPalette::text().name(), ModalityPalette::image().name(), ModalityPalette::special().name()));
  m_grid->setToolTip(tr("Entries kept per layer (row) and KV head (column), split into text / image / special. "
                        "Click a cell for the head's strip and image overlay; Shift+F1 explains more."));
  m_strip->setWhatsThis(
      tr("<b>The strip</b>: every position of the conversation, in order, for the selected head: bright = the head "
         "still keeps its entry, faded = evicted, in the colour of its modality (text, image, special). The band "
         "under a kept position is its β or score. Hover a position for its token, message, image patch, β and "
         "score."));
  m_overlay->setWhatsThis(
      tr("<b>The image overlay</b>: the conversation's last image with the patch grid the model saw. Patches whose "
         "entries the selected head keeps are clear and outlined; evicted ones are darkened. With <i>All heads</i>, "
         "each patch is shaded by how many heads keep it."));
  m_timeline->setWhatsThis(tr("<b>The timeline</b>: KV entries held by the whole cache over the forward steps; each "
                              "drop is one compression, the dashed line is the budget M_global."));
  updateBudgetHint();
}

void MainWindow::sendSampleTurn() {
  if (!m_hasModel || m_answering) return;
  if (!m_sampleDir) m_sampleDir = std::make_unique<QTemporaryDir>();
  try {
    const SampleTurn sample = makeSampleTurn(m_sampleDir->path(), m_model.vision.takes_images());
    sendTurn(sample.text, sample.images);
  } catch (const std::exception& e) {
    showError(tr("Cannot make the sample turn"), QString::fromStdString(e.what()));
  }
}

void MainWindow::buildTour() {
  m_tour = new TourPanel(this);
  m_tour->setAnchor(m_conversation);
  QToolBar* policyBar = findChild<QToolBar*>(QStringLiteral("policyToolbar"));
  std::vector<TourStep> steps;
  steps.push_back({tr("Send the sample turn"),
                   tr("The sample is a question about a picture of coloured shapes. <b>Send it</b> puts it in the "
                      "conversation: the image is encoded into patch entries, the question into text entries, and "
                      "the model answers."),
                   [this] { return static_cast<QWidget*>(m_send); }, {}, tr("Send it"), [this] { sendSampleTurn(); }});
  steps.push_back({tr("Watch the grid"),
                   tr("Each cell is one KV head of one layer; its bar is how many entries that head keeps: "
                      "<span style='color:%1'>text</span>, <span style='color:%2'>image</span>, "
                      "<span style='color:%3'>special</span>. While the answer streams, the bars grow until the "
                      "budget makes the policy evict.")
                       .arg(ModalityPalette::text().name(), ModalityPalette::image().name(),
                            ModalityPalette::special().name()),
                   [this] { return static_cast<QWidget*>(m_grid); }, {}, {}, {}});
  steps.push_back({tr("Click a head"),
                   tr("Click any cell to inspect that head. Heads differ: some keep mostly image patches, others "
                      "mostly text."),
                   [this] { return static_cast<QWidget*>(m_grid); }, {}, tr("Pick the last layer's head 0"),
                   [this] { m_grid->setSelectedHead(std::max(0, m_grid->layerCount() - 1), 0); }});
  steps.push_back({tr("The strip"),
                   tr("Every position of the conversation for that head: bright = kept, faded = evicted. The band "
                      "below a kept position is its β, the gate's keep factor (1 = never forgotten). Hover a "
                      "position for its token."),
                   [this] { return static_cast<QWidget*>(m_stripScroll); }, {}, {}, {}});
  steps.push_back({tr("The image overlay"),
                   tr("The image with the model's patch grid: clear, outlined patches are the ones this head keeps; "
                      "darkened ones were evicted."),
                   [this] { return static_cast<QWidget*>(m_overlay); },
                   [this] { m_lowerTabs->setCurrentWidget(m_overlay); }, {}, {}});
  steps.push_back({tr("Lower the budget"),
                   tr("The budget M is the number of entries each KV head of each layer may keep (M_global = "
                      "M·L·H_kv over the model). Lower it to make the policy choose harder."),
                   [this] { return static_cast<QWidget*>(m_budget); }, {}, tr("Halve it"), [this] {
                     m_budget->setEntriesPerHead(std::max<int64_t>(1, m_budget->entriesPerHead() / 2));
                     applyEvictionFromControls();
                   }});
  steps.push_back({tr("Replay"),
                   tr("Replay runs the whole conversation again under the new budget: compare the answer, the grid "
                      "and the overlay with before. <b>Compare…</b> shows two settings side by side."),
                   [this, policyBar] {
                     return policyBar ? policyBar->widgetForAction(m_replayAction) : static_cast<QWidget*>(nullptr);
                   },
                   {}, tr("Replay now"), [this] { replayConversation(); }});
  steps.push_back({tr("Try your own"),
                   tr("Attach a picture of your own (Attach image…, drag and drop or paste) and ask about it. The "
                      "built-in demo model knows only its small world (four shapes, six colours, counts, positions, "
                      "several images: the note above the input lists them); its pictures need no labels, the model "
                      "numbers them itself, so \"In image 2, …\" works. Any other checkpoint answers about any "
                      "picture."),
                   [this] { return m_demoHint->isVisible() ? static_cast<QWidget*>(m_demoHint) : static_cast<QWidget*>(m_attach); }, {}, {},
                   {}});
  m_tour->setSteps(std::move(steps));
}

void MainWindow::startTour() { m_tour->start(); }
