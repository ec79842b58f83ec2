// TrimKV Studio widget tests (QTest, offscreen). The model is $TRIMKV_DEMO_MODEL (CTest sets the
// tiny random Idefics3 fixture: 2 layers x 2 KV heads, gibberish answers), else the embedded demo
// model. The tests check the plumbing between the worker and the widgets, counts and timing.
#include <QCheckBox>
#include <QSlider>
#include <QProcess>
#include <QMenu>
#include <QSettings>
#include <QStandardPaths>
#include <QSvgRenderer>
#include <QClipboard>
#include <QComboBox>
#include <QMimeData>
#include <QElapsedTimer>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTextBlock>
#include <QScrollBar>
#include <QStatusBar>
#include <QLabel>
#include <QWheelEvent>
#include <cmath>
#include <signal.h>
#include <unistd.h>
#include <QDir>
#include <QFileInfo>
#include <QMessageBox>
#include <QPushButton>
#include <QImageReader>
#include <QSignalSpy>
#include <QSpinBox>
#include <QtTest>
#include <memory>
#include <random>
#include <set>
#include <tuple>

#include <QLineEdit>
#include <QListWidget>
#include <QProgressBar>
#include <QTableWidget>
#include <QtCharts/QChart>
#include <QtCharts/QChartView>
#include <QtCharts/QCategoryAxis>
#include <QtCharts/QLineSeries>
#include <QtCharts/QValueAxis>

#include "analysis_worker.h"
#include "budget_chart.h"
#include "random_llama.h"
#include "budget_control.h"
#include "compare_window.h"
#include "conversation_list.h"
#include "evaluate_window.h"
#include "tour_panel.h"
#include "budget_units.h"
#include "chat_input.h"
#include "conversation_file.h"
#include "frame_history.h"
#include "recent_models.h"
#include "policy_options_form.h"
#include "conversation_view.h"
#include "draft_keeper.h"
#include "generation_settings.h"
#include "head_grid.h"
#include "head_strip.h"
#include "image_overlay.h"
#include "image_viewer.h"
#include "modality_palette.h"
#include "main_window.h"
#include "model_picker.h"
#include "quit_signals.h"
#include "screenshot_run.h"
#include "session_worker.h"
#include "system_prompt_panel.h"
#include "timeline_chart.h"
#include "trimkv/core/compute_device.h"
#include "trimkv/core/default_model.h"
#include "trimkv/core/error.h"

namespace {
// The sanitizers run the model slower (tests/sanitize.sh): ThreadSanitizer 5-15 times, ASan about
// 7 times in the longest prefill layers here. Waits grow with it. kStopBoundMs is issue 21's bound
// on how soon a stop returns control: the normal build's claim (200 ms). Under ASan the stop in
// the 6,000-token later turn took 500 ms (61-71 ms normally): the bound there is 1 s. Under TSan
// such a layer alone takes seconds; there only the stop itself is checked.
#if defined(__SANITIZE_THREAD__)
constexpr int kSlowdown = 8;
constexpr qint64 kStopBoundMs = 60'000;
#elif defined(__SANITIZE_ADDRESS__)
constexpr int kSlowdown = 4;
constexpr qint64 kStopBoundMs = 1'000;
#else
constexpr int kSlowdown = 1;
constexpr qint64 kStopBoundMs = 200;
#endif
constexpr int kLoadTimeoutMs = 120'000 * kSlowdown;
constexpr int kTurnTimeoutMs = 120'000 * kSlowdown;
// How long to wait for a prompt reaction of the worker (a policy applied, a frame, an error).
constexpr int kEventTimeoutMs = 10'000 * kSlowdown;
const QString kImage = QStringLiteral(TRIMKV_TEST_DATA_DIR "/vlm/images/a.png");
const QString kNotAnImage = QStringLiteral(TRIMKV_TEST_DATA_DIR "/vlm/images/not_an_image.png");
// A picture of the independent test set (tests/data/independent-shapes: Pillow, JPEG, 273 px, six
// objects) with its one question about a colour, which the built-in demo model answers right.
const QString kIndependentPicture = QStringLiteral("ind-000005_1.jpg");
const QString kIndependentShape = QStringLiteral("triangle");
const QString kIndependentColour = QStringLiteral("green");
// ~12,000 tokens (the built-in demo model takes 16,384): seconds of prefill on one thread.
const QString kLongPrompt = QStringLiteral("blue ").repeated(12000) + QStringLiteral("What colour is the circle?");
}  // namespace

// Counts a signal a worker emits on its own thread, in the receiver's thread (queued): a
// QSignalSpy records where the signal is emitted, so polling one from the test's thread while the
// worker emits is a data race (ThreadSanitizer found two).
struct QueuedCount {
  template <class Sender, class Signal>
  QueuedCount(Sender* sender, Signal signal, QObject* receiver)
      : c(QObject::connect(sender, signal, receiver, [this] { ++n; }, Qt::QueuedConnection)) {}
  ~QueuedCount() { QObject::disconnect(c); }
  QueuedCount(const QueuedCount&) = delete;
  QueuedCount& operator=(const QueuedCount&) = delete;
  int n = 0;  // declared (and zeroed) before the connection that counts into it
  QMetaObject::Connection c;
};

class MainWindowTest : public QObject {
  Q_OBJECT

 private:
  std::unique_ptr<MainWindow> m_window;
  QTemporaryDir m_settingsDir;  // QSettings of the tests (recent models), not the user's

  // Sends a turn and waits for its answer; returns the stats. No answer in time fails the test
  // (the empty stats returned then are never a pass).
  TurnStats answer(const QString& text, const QStringList& images) {
    QSignalSpy finished(m_window.get(), &MainWindow::answerFinished);
    m_window->sendTurn(text, images);
    if (!finished.wait(kTurnTimeoutMs)) {
      QTest::qFail("no answer arrived within the turn timeout", __FILE__, __LINE__);
      return {};
    }
    return finished.takeFirst().at(0).value<TurnStats>();
  }

  void setBudget(int budget) {
    BudgetControl* control = m_window->budgetControl();
    control->setUnit(BudgetUnit::EntriesPerHead);
    // A spin box that already shows the value emits nothing: move it away first.
    if (control->entriesPerHead() == budget) setBudget(budget + 1);
    QSignalSpy applied(m_window.get(), &MainWindow::evictionApplied);
    control->spinBox()->setValue(budget);  // debounced, then sent to the worker
    QVERIFY(applied.wait(kEventTimeoutMs));
    const auto s = applied.takeLast().at(0).value<trimkv::EvictionSettings>();
    QVERIFY(s.budget_per_head.has_value());
    QCOMPARE(*s.budget_per_head, int64_t{budget});
  }

  // A home for a trimkv-studio process: offscreen, its settings (config/TrimKV/...) and data
  // (data/TrimKV/TrimKV Studio/..., the autosave and the draft) in a temporary folder.
  struct StudioHome {
    QTemporaryDir dir;
    QProcessEnvironment env() const {
      QProcessEnvironment e = QProcessEnvironment::systemEnvironment();
      e.insert(QStringLiteral("QT_QPA_PLATFORM"), QStringLiteral("offscreen"));
      e.insert(QStringLiteral("XDG_DATA_HOME"), dir.filePath(QStringLiteral("data")));
      e.insert(QStringLiteral("XDG_CONFIG_HOME"), dir.filePath(QStringLiteral("config")));
      return e;
    }
    QString autosaved(const QString& name) const {
      return dir.filePath(QStringLiteral("data/TrimKV/TrimKV Studio/autosave/") + name);
    }
  };

  // A kept draft as the Studio writes it: one user message, kImage and `text`.
  static void keepDraft(const QString& file, const QString& text) {
    QVERIFY(QDir().mkpath(QFileInfo(file).absolutePath()));
    saveConversationFile(file,
                         {{"user", {trimkv::ContentPart::image_part(kImage.toStdString()),
                                    trimkv::ContentPart::text_part(text.toStdString())}}},
                         QString());
  }

  // With TRIMKV_GUI_SHOTS=DIR, saves what `w` shows to DIR/name (to look at the windows).
  QRect onWindowRect(QWidget* w) const { return {w->mapTo(m_window.get(), QPoint(0, 0)), w->size()}; }

  static void saveShot(QWidget* w, const QString& name) {
    const QString dir = qEnvironmentVariable("TRIMKV_GUI_SHOTS");
    if (!dir.isEmpty()) w->grab().save(QDir(dir).filePath(name));
  }

  void newConversation() {
    QSignalSpy frames(m_window.get(), &MainWindow::frameShown);
    m_window->newConversation();
    QVERIFY(frames.wait(kEventTimeoutMs));
    QCOMPARE(m_window->lastFrame().state.tokens, int64_t{0});
  }

  // A new conversation, then the window's offer of the autosaved one (what a start calls): the
  // dialog once shown, or nullptr.
  QMessageBox* openRestoreOffer() {
    newConversation();
    m_window->offerAutosaveRestore();
    auto* box = m_window->findChild<QMessageBox*>(QStringLiteral("restoreDialog"));
    if (box && !QTest::qWaitFor([box] { return box->isVisible(); })) return nullptr;
    return box;
  }

 private Q_SLOTS:
  void initTestCase() {
    QString dir = qEnvironmentVariable("TRIMKV_DEMO_MODEL");
    if (dir.isEmpty()) dir = QString::fromStdString(trimkv::default_model_dir());
    QCoreApplication::setOrganizationName(QStringLiteral("TrimKV-tests"));
    QCoreApplication::setApplicationName(QStringLiteral("test_gui"));
    QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, m_settingsDir.path());
    QSettings::setPath(QSettings::IniFormat, QSettings::UserScope, m_settingsDir.path());
    m_window = std::make_unique<MainWindow>();
    m_window->restoreSettings();  // persistence on (into m_settingsDir): recent models are recorded
    QVERIFY(openWithItsPolicy(*m_window, dir));
    // Fixed-length answers: the random fixture may emit EOS at any point.
    trimkv::GenerationParams params;
    params.max_new_tokens = 48;
    params.stop_at_eos = false;
    m_window->setGenerationParams(params);
  }

  void cleanupTestCase() { m_window.reset(); }

  void startsOnTheModelWithEveryPolicy() {
    const ModelSummary& m = m_window->model();
    QVERIFY(m.info.n_layer > 0);
    QCOMPARE(m_window->policyCombo()->count(), static_cast<int>(trimkv::describe_policies().size()));
    QVERIFY(m_window->policyCombo()->findData(QStringLiteral("dbtrimkv")) >= 0);
    QVERIFY(!m_window->windowIcon().pixmap(32, 32).isNull());  // the embedded SVG icon renders
    QVERIFY(m_window->sendButton()->isEnabled());
  }

  void aTurnWithAnImageGetsAnAnswer() {
    const TurnStats stats = answer(QStringLiteral("What is in the image?"), {kImage});
    QCOMPARE(stats.generatedTokens, int64_t{48});
    QVERIFY(stats.promptTokens > 0);
    QVERIFY(stats.timeToFirstTokenMs > 0);
    QCOMPARE(m_window->conversation()->messageCount(), 2);
    QCOMPARE(m_window->conversation()->lastAnswer(), stats.text);
    QVERIFY(!m_window->isAnswering());
    const InspectorFrame& f = m_window->lastFrame();
    QCOMPARE(f.phase, QStringLiteral("idle"));
    QCOMPARE(static_cast<int>(f.state.images.size()), 1);
    QVERIFY(f.state.kv_image_entries > 0);
  }

  void clickingAThumbnailOpensTheImageAtFullSize() {
    ConversationView* view = m_window->conversation();
    view->verticalScrollBar()->setValue(0);
    const QString link = ConversationView::imageLink(kImage).toString();
    int position = -1;
    for (QTextBlock b = view->document()->begin(); b.isValid() && position < 0; b = b.next())
      for (auto it = b.begin(); !it.atEnd(); ++it)
        if (it.fragment().charFormat().isImageFormat() && it.fragment().charFormat().anchorHref() == link)
          position = it.fragment().position();
    QVERIFY(position >= 0);
    // A real click on the thumbnail.
    QTextCursor c(view->document());
    c.setPosition(position);
    const QRect r = view->cursorRect(c);
    const QPoint onImage(r.left() + 20, r.bottom() - 20);
    QCOMPARE(view->anchorAt(onImage), link);
    QTest::mouseClick(view->viewport(), Qt::LeftButton, {}, onImage);
    auto* viewer = m_window->findChild<ImageViewer*>(QStringLiteral("imageViewer"));
    QVERIFY(viewer);
    QTRY_VERIFY(viewer->isVisible());
    const QImage original(kImage);
    QCOMPARE(viewer->image().size(), original.size());
    QCOMPARE(viewer->shownSize(), original.size());  // at 100%
    viewer->close();
  }

  void regenerateReplacesTheLastAnswer() {
    const int before = m_window->conversation()->messageCount();
    const int64_t tokens = m_window->lastFrame().state.tokens;
    QSignalSpy finished(m_window.get(), &MainWindow::answerFinished);
    m_window->regenerate();
    QVERIFY(finished.wait(kTurnTimeoutMs));
    const TurnStats stats = finished.takeFirst().at(0).value<TurnStats>();
    QCOMPARE(stats.generatedTokens, int64_t{48});
    QCOMPARE(m_window->conversation()->messageCount(), before);
    QCOMPARE(m_window->conversation()->lastAnswer(), stats.text);
    // Same question, same answer length: the stream is as long as before.
    QCOMPARE(m_window->lastFrame().state.tokens, tokens);
  }

  void theGridShowsEveryHeadOfTheLastSnapshot() {
    const InspectorFrame& f = m_window->lastFrame();
    QVERIFY(f.kv);
    HeadGrid* grid = m_window->headGrid();
    QCOMPARE(grid->layerCount(), static_cast<int>(m_window->model().info.n_layer));
    QCOMPARE(grid->headCount(), static_cast<int>(m_window->model().info.n_kv_head));
    int64_t total = 0;
    for (int l = 0; l < grid->layerCount(); ++l)
      for (int h = 0; h < grid->headCount(); ++h) {
        const trimkv::ModalityCounts shown = grid->cellCounts(l, h);
        const trimkv::HeadSnapshot& head = f.kv->head(l, h);
        QVERIFY(shown == head.counts);
        QCOMPARE(shown.total(), static_cast<int64_t>(head.entries.size()));
        total += shown.total();
      }
    QCOMPARE(total, f.state.kv_entries);
    QCOMPARE(total, f.kv->total_entries);

    // Not only the snapshot it was handed: an engine built here, apart from the Studio's worker,
    // under the same eviction and generation settings and given the same turn (the conversation so
    // far: one image turn, its answer regenerated, greedy), holds per head what the grid shows.
    auto engine = trimkv::vision::ChatEngine::load(m_window->model().dir.toStdString());
    engine->set_eviction(m_window->eviction());
    engine->add_user_turn("What is in the image?", {kImage.toStdString()});
    const std::string text = engine->respond(m_window->generationSettings()->params()).text;
    QCOMPARE(QString::fromStdString(text), m_window->conversation()->lastAnswer());
    const trimkv::KvSnapshot apart = engine->snapshot();
    QCOMPARE(apart.n_tokens, f.state.tokens);
    for (int l = 0; l < grid->layerCount(); ++l)
      for (int h = 0; h < grid->headCount(); ++h) {
        const trimkv::ModalityCounts& want = apart.head(l, h).counts;
        const trimkv::ModalityCounts shown = grid->cellCounts(l, h);
        QVERIFY2(shown == want, qPrintable(QStringLiteral("head %1.%2: the grid shows %3 text + %4 image, the engine "
                                                           "built apart holds %5 + %6")
                                               .arg(l).arg(h).arg(shown.text).arg(shown.image).arg(want.text).arg(want.image)));
      }
  }

  void theStripAndOverlayShowTheSelectedHead() {
    const InspectorFrame& f = m_window->lastFrame();
    HeadGrid* grid = m_window->headGrid();
    const int l = grid->layerCount() - 1, h = grid->headCount() - 1;
    grid->setSelectedHead(l, h);
    const trimkv::HeadSnapshot& head = f.kv->head(l, h);
    QCOMPARE(m_window->headStrip()->keptCount(), static_cast<int>(head.entries.size()));
    const int16_t lastImage = f.state.images.back().image_id;
    int keptPatches = 0;
    for (const auto& e : head.entries)
      if (e.modality == trimkv::Modality::Image && e.image_id == lastImage) ++keptPatches;
    QVERIFY(m_window->imageOverlay()->hasImage());
    QCOMPARE(m_window->imageOverlay()->keptPatchCount(), keptPatches);
    QCOMPARE(static_cast<int64_t>(m_window->imageOverlay()->patchCount()), f.state.images.back().n_image_tokens);

    // All heads: every patch counts the heads that keep it; the strip counts positions kept anywhere.
    m_window->allHeadsToggle()->setChecked(true);
    QMap<std::tuple<int, int, int>, int> keepers;
    std::set<int32_t> keptAnywhere;
    for (const auto& hs : f.kv->heads)
      for (const auto& e : hs.entries) {
        keptAnywhere.insert(e.token_index);
        if (e.modality == trimkv::Modality::Image && e.image_id == lastImage) ++keepers[{e.tile, e.patch_row, e.patch_col}];
      }
    QVERIFY(!keepers.isEmpty());
    for (auto it = keepers.begin(); it != keepers.end(); ++it) {
      const auto [tile, row, col] = it.key();
      QCOMPARE(m_window->imageOverlay()->keepersOf(tile, row, col), it.value());
    }
    QCOMPARE(m_window->headStrip()->keptCount(), static_cast<int>(keptAnywhere.size()));
    m_window->allHeadsToggle()->setChecked(false);
    QCOMPARE(m_window->headStrip()->keptCount(), static_cast<int>(head.entries.size()));
  }

  void theStripNamesEveryTokenAndShadesByBetaOrScore() {
    const InspectorFrame& f = m_window->lastFrame();
    QVERIFY(f.tokens);
    QCOMPARE(static_cast<int64_t>(f.tokens->size()), f.kv->n_tokens);
    int images = 0;
    for (const trimkv::vision::StreamToken& t : *f.tokens) {
      QVERIFY(t.id >= 0);  // after the turn every position has its id
      if (t.info.modality == trimkv::Modality::Image) {
        ++images;
        QVERIFY(t.info.image_id >= 0);
      }
    }
    int64_t imageTokens = 0;
    for (const trimkv::ImageRecord& r : f.state.images) imageTokens += r.n_image_tokens;
    QCOMPARE(static_cast<int64_t>(images), imageTokens);

    m_window->headGrid()->setSelectedHead(0, 0);
    HeadStrip* strip = m_window->headStrip();
    QCOMPARE(strip->shade(), HeadStrip::Shade::Beta);
    const trimkv::HeadSnapshot& head = f.kv->head(0, 0);
    QVERIFY(!head.entries.empty());
    // A kept text position: its band is β, its tooltip names the token and β.
    const trimkv::SnapshotEntry* kept = nullptr;
    for (const auto& e : head.entries)
      if (e.modality == trimkv::Modality::Text && !(*f.tokens)[static_cast<size_t>(e.token_index)].text.empty()) kept = &e;
    QVERIFY(kept);
    const int pos = kept->token_index;
    QCOMPARE(strip->shadeOf(pos), std::exp(static_cast<double>(kept->log_beta)));
    const QString tip = strip->tooltipFor(pos);
    QVERIFY2(tip.contains(QString::fromStdString((*f.tokens)[static_cast<size_t>(pos)].text).left(10)), qPrintable(tip));
    QVERIFY(tip.contains(QStringLiteral("β =")));
    // The band is drawn in the ramp's colour.
    const QImage drawn = strip->grab().toImage();
    const QRect cell = strip->cellRect(pos);
    QCOMPARE(QColor(drawn.pixel(cell.center().x(), cell.bottom() - 1)).name(),
             ModalityPalette::ramp(strip->shadeOf(pos)).name());

    // Score: scaled over the head's kept entries, 1 for the highest.
    m_window->shadeCombo()->setCurrentIndex(m_window->shadeCombo()->findData(static_cast<int>(HeadStrip::Shade::Score)));
    QCOMPARE(strip->shade(), HeadStrip::Shade::Score);
    const trimkv::SnapshotEntry* best = nullptr;
    for (const auto& e : head.entries)
      if (std::isfinite(e.score) && (!best || e.score > best->score)) best = &e;
    if (best) {  // the policy scores its entries (h2o: accumulated attention)
      QCOMPARE(strip->shadeOf(best->token_index), 1.0);
      QVERIFY(strip->tooltipFor(best->token_index).contains(QStringLiteral("score =")));
    } else {
      QVERIFY(std::isnan(strip->shadeOf(pos)));
    }
    // An evicted position has no band and says so.
    for (int t = 0; t < f.kv->n_tokens; ++t)
      if (!head.kept(t)) {
        QVERIFY(std::isnan(strip->shadeOf(t)));
        QVERIFY(strip->tooltipFor(t).contains(QStringLiteral("evicted by layer 0 head 0")));
        break;
      }
    m_window->shadeCombo()->setCurrentIndex(0);
  }

  void loweringTheBudgetLowersTheCounts() {
    auto maxPerHead = [this] {
      int64_t most = 0;
      HeadGrid* grid = m_window->headGrid();
      for (int l = 0; l < grid->layerCount(); ++l)
        for (int h = 0; h < grid->headCount(); ++h) most = std::max(most, grid->cellCounts(l, h).total());
      return most;
    };
    setBudget(48);
    newConversation();
    answer(QStringLiteral("What is in the image?"), {kImage});
    const int64_t totalHigh = m_window->lastFrame().state.kv_entries, mostHigh = maxPerHead();
    setBudget(8);
    newConversation();
    answer(QStringLiteral("What is in the image?"), {kImage});
    const int64_t totalLow = m_window->lastFrame().state.kv_entries, mostLow = maxPerHead();
    QVERIFY2(totalLow < totalHigh, qPrintable(QStringLiteral("%1 !< %2").arg(totalLow).arg(totalHigh)));
    QVERIFY(mostLow < mostHigh);
    QVERIFY(m_window->lastFrame().state.eviction_events > 0);
    // The timeline plots the trace of the turn: one drop per eviction.
    QVERIFY(m_window->lastFrame().trace);
    QCOMPARE(m_window->timeline()->eventCount(), static_cast<int>(m_window->lastFrame().trace->events.size()));
    QCOMPARE(static_cast<int64_t>(m_window->timeline()->eventCount()), m_window->lastFrame().state.eviction_events);
  }

  void aBadModelFolderShowsAnErrorAndTheAppStaysUsable() {
    QSignalSpy errors(m_window.get(), &MainWindow::errorReported);
    m_window->openModel(QStringLiteral("/nonexistent/model-folder"));
    QVERIFY(errors.wait(kEventTimeoutMs));
    QVERIFY(errors.first().at(1).toString().contains(QStringLiteral("/nonexistent/model-folder")));
    QMessageBox* box = m_window->findChild<QMessageBox*>(QStringLiteral("errorDialog"));
    QVERIFY(box);
    QTRY_VERIFY(box->isVisible());
    QVERIFY(box->text().contains(QStringLiteral("/nonexistent/model-folder")));
    box->accept();
    // The previous model still answers.
    const TurnStats stats = answer(QStringLiteral("And now?"), {});
    QCOMPARE(stats.generatedTokens, int64_t{48});
  }

  void anUnreadableImageIsRefusedAndTheConversationKept() {
    const int before = m_window->conversation()->messageCount();
    const int64_t tokens = m_window->lastFrame().state.tokens;
    QSignalSpy errors(m_window.get(), &MainWindow::errorReported);
    QSignalSpy failed(m_window.get(), &MainWindow::turnFailed);
    m_window->sendTurn(QStringLiteral("Look at this"), {kNotAnImage});
    QVERIFY(failed.wait(kTurnTimeoutMs));
    QCOMPARE(errors.count(), 1);
    QVERIFY(errors.first().at(1).toString().contains(QStringLiteral("not_an_image.png")));
    QCOMPARE(m_window->conversation()->messageCount(), before);
    QCOMPARE(m_window->input()->toPlainText(), QStringLiteral("Look at this"));
    QCOMPARE(m_window->attachments(), QStringList{kNotAnImage});
    QTRY_COMPARE(m_window->lastFrame().state.tokens, tokens);
    for (QMessageBox* box : m_window->findChildren<QMessageBox*>()) box->accept();
    m_window->input()->clear();
    m_window->clearAttachments();
  }

  void pastedImageFilesBecomeAttachmentsAndCtrlReturnSends() {
    auto* mime = new QMimeData;
    mime->setUrls({QUrl::fromLocalFile(kImage)});
    QGuiApplication::clipboard()->setMimeData(mime);
    m_window->input()->setFocus();
    m_window->input()->paste();
    QCOMPARE(m_window->attachments(), QStringList{kImage});
    QCOMPARE(m_window->input()->toPlainText(), QString());  // files are attached, not pasted as text
    m_window->input()->setPlainText(QStringLiteral("And this one?"));
    m_window->activateWindow();
    QVERIFY(QTest::qWaitForWindowActive(m_window.get()));
    QSignalSpy finished(m_window.get(), &MainWindow::answerFinished);
    const int before = m_window->conversation()->messageCount();
    QTest::keyClick(m_window->input(), Qt::Key_Return, Qt::ControlModifier);
    QVERIFY(finished.wait(kTurnTimeoutMs));
    QCOMPARE(m_window->conversation()->messageCount(), before + 2);
    QVERIFY(m_window->attachments().isEmpty());
    QCOMPARE(m_window->input()->toPlainText(), QString());
    QCOMPARE(static_cast<int>(m_window->lastFrame().state.images.size()), 2);
  }

  void savingThenOpeningRestoresTheConversation() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const QString path = dir.filePath(QStringLiteral("chat.json"));
    const int messages = m_window->conversation()->messageCount();
    const QString answer = m_window->conversation()->lastAnswer();
    const size_t images = m_window->lastFrame().state.images.size();
    QVERIFY(messages >= 2 && images >= 1);
    QSignalSpy saved(m_window.get(), &MainWindow::conversationSaved);
    m_window->saveConversation(path);
    QVERIFY(saved.wait(kEventTimeoutMs));
    // The image is copied beside the file, named by its content (and its name).
    QCOMPARE(QDir(dir.filePath(QStringLiteral("chat-images"))).entryList({QStringLiteral("*-a.png")}).size(), 1);
    newConversation();
    QCOMPARE(m_window->conversation()->messageCount(), 0);
    QSignalSpy loaded(m_window.get(), &MainWindow::conversationLoaded);
    m_window->loadConversation(path);
    QVERIFY(loaded.wait(kTurnTimeoutMs));
    QCOMPARE(m_window->conversation()->messageCount(), messages);
    QCOMPARE(m_window->conversation()->lastAnswer(), answer);
    QTRY_COMPARE(m_window->lastFrame().state.images.size(), images);
    // The replayed conversation reads the copies, not the originals.
    QVERIFY(QString::fromStdString(m_window->lastFrame().state.images.front().source).startsWith(dir.path()));
    // A malformed file is refused with a message naming it; the conversation stays.
    QFile bad(dir.filePath(QStringLiteral("bad.json")));
    QVERIFY(bad.open(QIODevice::WriteOnly));
    bad.write("{\"messages\": [{\"role\": \"robot\", \"content\": []}]}");
    bad.close();
    QSignalSpy errors(m_window.get(), &MainWindow::errorReported);
    m_window->loadConversation(bad.fileName());
    QVERIFY(errors.wait(kEventTimeoutMs));
    QVERIFY(errors.first().at(1).toString().contains(QStringLiteral("bad.json")));
    QVERIFY(errors.first().at(1).toString().contains(QStringLiteral("role")));
    QCOMPARE(m_window->conversation()->messageCount(), messages);
    for (QMessageBox* box : m_window->findChildren<QMessageBox*>()) box->accept();
  }

  void exportsWriteTheFiguresTheTraceAndTheCounts() {
    QTemporaryDir dir;
    const InspectorFrame& f = m_window->lastFrame();
    QVERIFY(f.kv && !f.state.images.empty() && f.trace);
    const std::vector<std::pair<MainWindow::Figure, QString>> figures = {
        {MainWindow::Figure::HeadGrid, QStringLiteral("grid")},
        {MainWindow::Figure::ImageOverlay, QStringLiteral("overlay")},
        {MainWindow::Figure::Timeline, QStringLiteral("timeline")}};
    for (const auto& [figure, name] : figures) {
      const QString png = dir.filePath(name + QStringLiteral(".png"));
      QVERIFY(m_window->exportFigureTo(figure, png));
      const QImage image(png);
      QVERIFY2(!image.isNull() && image.width() > 50 && image.height() > 50, qPrintable(name));
      QSet<QRgb> colours;
      for (int y = 0; y < image.height(); y += 4)
        for (int x = 0; x < image.width(); x += 4) colours.insert(image.pixel(x, y));
      QVERIFY2(colours.size() > 5, qPrintable(name));  // drawn, not blank
      const QString svg = dir.filePath(name + QStringLiteral(".svg"));
      QVERIFY(m_window->exportFigureTo(figure, svg));
      QSvgRenderer renderer(svg);
      QVERIFY2(renderer.isValid(), qPrintable(name));
      QVERIFY(renderer.defaultSize().width() > 50);
      QVERIFY(QFileInfo(svg).size() > 1000);  // the widget's drawing, not an empty document
    }

    // The trace as core's JSON: it parses back to the trace the window shows.
    const QString json = dir.filePath(QStringLiteral("trace.json"));
    QVERIFY(m_window->exportTraceTo(json));
    QFile traceFile(json);
    QVERIFY(traceFile.open(QIODevice::ReadOnly));
    const trimkv::Trace trace = trimkv::trace_from_json(traceFile.readAll().toStdString());
    QVERIFY(trace == *f.trace);
    QCOMPARE(static_cast<int64_t>(trace.events.size()), f.state.eviction_events);

    // Per-head counts: one row per (layer, KV head), as the grid shows them.
    const QString csvPath = dir.filePath(QStringLiteral("counts.csv"));
    QVERIFY(m_window->exportHeadCountsTo(csvPath));
    QFile csvFile(csvPath);
    QVERIFY(csvFile.open(QIODevice::ReadOnly));
    const QStringList lines = QString::fromUtf8(csvFile.readAll()).split(QLatin1Char('\n'), Qt::SkipEmptyParts);
    const int heads = f.kv->geometry.n_layer * f.kv->geometry.n_kv_head;
    QCOMPARE(lines.size(), 1 + heads);
    QCOMPARE(lines.front(), QStringLiteral("layer,kv_head,text,image,special,total"));
    for (int i = 1; i < lines.size(); ++i) {
      const QStringList v = lines[i].split(QLatin1Char(','));
      QCOMPARE(v.size(), 6);
      const trimkv::ModalityCounts c = m_window->headGrid()->cellCounts(v[0].toInt(), v[1].toInt());
      QCOMPARE(v[2].toLongLong(), static_cast<qlonglong>(c.text));
      QCOMPARE(v[3].toLongLong(), static_cast<qlonglong>(c.image));
      QCOMPARE(v[4].toLongLong(), static_cast<qlonglong>(c.special));
      QCOMPARE(v[5].toLongLong(), static_cast<qlonglong>(c.total()));
    }

    // A name the exporter cannot honour is refused with a message naming it.
    QSignalSpy errors(m_window.get(), &MainWindow::errorReported);
    QVERIFY(!m_window->exportFigureTo(MainWindow::Figure::HeadGrid, dir.filePath(QStringLiteral("grid.txt"))));
    QCOMPARE(errors.count(), 1);
    QVERIFY(errors.first().at(1).toString().contains(QStringLiteral("grid.txt")));
    QVERIFY(!m_window->exportTraceTo(dir.filePath(QStringLiteral("missing-folder/trace.json"))));
    QVERIFY(errors.last().at(1).toString().contains(QStringLiteral("missing-folder")));
    for (QMessageBox* box : m_window->findChildren<QMessageBox*>()) box->accept();
  }

  void everyCompletedTurnIsAutosavedAndTheAutosaveReopens() {
    QVERIFY(MainWindow::defaultAutosaveFile().startsWith(
        QStandardPaths::writableLocation(QStandardPaths::AppDataLocation)));
    QTemporaryDir dir;
    const QString path = dir.filePath(QStringLiteral("autosave/conversation.json"));
    m_window->setAutosaveFile(path);
    newConversation();
    QSignalSpy autosaved(m_window.get(), &MainWindow::autosaved);
    answer(QStringLiteral("What is in the image?"), {kImage});
    QCOMPARE(autosaved.count(), 1);  // before the answer was reported finished
    QVERIFY(QFileInfo::exists(path));
    std::vector<trimkv::Message> messages = loadConversationFile(path);
    QCOMPARE(static_cast<int>(messages.size()), 2);
    const QString copy = QString::fromStdString(messages[0].content.at(0).path);
    QVERIFY(copy.startsWith(dir.filePath(QStringLiteral("autosave/conversation-images/"))));
    QVERIFY(QFileInfo::exists(copy));
    answer(QStringLiteral("And now?"), {});
    QCOMPARE(autosaved.count(), 2);
    messages = loadConversationFile(path);
    QCOMPARE(static_cast<int>(messages.size()), 4);
    QCOMPARE(QString::fromStdString(messages[3].content.at(0).text), m_window->conversation()->lastAnswer());
    // Written atomically: no temporary file is left beside it, and the image is there once.
    QCOMPARE(QDir(dir.filePath(QStringLiteral("autosave"))).entryList(QDir::Files), QStringList{"conversation.json"});
    QCOMPARE(QDir(dir.filePath(QStringLiteral("autosave/conversation-images"))).entryList(QDir::Files).size(), 1);

    // On start the application offers it; Open replays it.
    auto* box = openRestoreOffer();
    QVERIFY(box);
    QVERIFY(box->text().contains(QStringLiteral("4 messages")));
    // While the offer is open a new turn does not replace the file on offer.
    answer(QStringLiteral("Meanwhile?"), {});
    QCOMPARE(autosaved.count(), 2);
    QCOMPARE(static_cast<int>(loadConversationFile(path).size()), 4);
    QSignalSpy loaded(m_window.get(), &MainWindow::conversationLoaded);
    box->button(QMessageBox::Open)->click();
    QVERIFY(loaded.wait(kTurnTimeoutMs));
    QCOMPARE(m_window->conversation()->messageCount(), 4);
    QTRY_COMPARE(static_cast<int>(m_window->lastFrame().state.images.size()), 1);
    // The next turn of the restored conversation saves over it, its image still in place.
    answer(QStringLiteral("One more?"), {});
    QCOMPARE(static_cast<int>(loadConversationFile(path).size()), 6);
    QCOMPARE(QDir(dir.filePath(QStringLiteral("autosave/conversation-images"))).entryList(QDir::Files).size(), 1);
    m_window->setAutosaveFile(QString());
  }

  // kill -9 of the real application mid-answer (issue 21): the autosave holds the conversation up
  // to the last completed turn and loads, and the window's restore offer (what a normal start
  // calls) offers it. The process is the build's trimkv-studio on the built-in demo model, driven
  // by --prompt ... --send; its second prompt is long (seconds of prefill), and the kill comes
  // 100 ms after the Studio says it sent that turn, while it is being read in.
  void aStudioKilledMidAnswerKeepsTheLastCompletedTurn() {
    const StudioHome home;
    QVERIFY(home.dir.isValid());
    const QProcessEnvironment env = home.env();
    const QString autosave = home.autosaved(QStringLiteral("conversation.json"));
    const QString first = QStringLiteral("What shape is the orange object?");
    // -1: the file does not load (torn); else the messages it holds (0 when there is none).
    auto messagesIn = [&autosave]() -> int {
      if (!QFileInfo::exists(autosave)) return 0;
      try {
        return static_cast<int>(loadConversationFile(autosave).size());
      } catch (const std::exception& e) {
        qWarning("the autosave does not load: %s", e.what());
        return -1;
      }
    };
    // delayMs < 0: kill 100 ms after the Studio reports sending the second turn (the first one
    // answered and autosaved by then); else that long after the start.
    auto runAndKill = [&](int delayMs) {
      QProcess studio;
      studio.setProcessEnvironment(env);
      studio.start(QStringLiteral(TRIMKV_STUDIO_PATH),
                   {QStringLiteral("--model"), QStringLiteral(TRIMKV_DEMO_MODEL_DIR), QStringLiteral("--threads"),
                    QStringLiteral("1"), QStringLiteral("--prompt"), first, QStringLiteral("--prompt"), kLongPrompt,
                    QStringLiteral("--send")});
      QVERIFY(studio.waitForStarted(10000));
      QElapsedTimer clock;
      clock.start();
      QByteArray said;
      if (delayMs < 0) {
        const QByteArray second = "sent scripted turn 2 of 2";
        while (!said.contains(second) && clock.elapsed() < kTurnTimeoutMs && studio.state() == QProcess::Running) {
          studio.waitForReadyRead(20);
          said += studio.readAllStandardError();
        }
        QVERIFY2(said.contains(second), said.constData());
        QTest::qWait(100);
      } else {
        QTest::qWait(delayMs);
      }
      QCOMPARE(studio.state(), QProcess::Running);  // it did not end on its own
      studio.kill();                                 // SIGKILL
      QVERIFY(studio.waitForFinished(10000));
      QCOMPARE(studio.exitStatus(), QProcess::CrashExit);
    };

    runAndKill(-1);
    if (QTest::currentTestFailed()) return;
    // The second answer was being computed: the file holds the first turn, complete.
    QCOMPARE(messagesIn(), 2);
    std::vector<trimkv::Message> messages = loadConversationFile(autosave);
    QCOMPARE(QString::fromStdString(messages[0].content.at(0).text), first);
    QVERIFY(!messages[1].content.at(0).text.empty());

    // Kills at moments drawn at random (seeded), a smoke check (a torn file is excluded by the
    // write itself, QSaveFile's rename; a kill rarely lands inside it): the file is absent or a
    // whole conversation of completed turns.
    std::mt19937 rng(2112);
    for (int i = 0; i < 4; ++i) {
      QFile::remove(autosave);
      const int delay = std::uniform_int_distribution<int>(0, 5000)(rng);
      runAndKill(delay);
      if (QTest::currentTestFailed()) return;
      const int n = messagesIn();
      qInfo("killed after %d ms: %d messages autosaved", delay, n);
      QVERIFY2(n == 0 || n == 2 || n == 4, qPrintable(QStringLiteral("%1 messages after a kill at %2 ms").arg(n).arg(delay)));
    }

    // Offered as on a start, and opening it replays the completed turn.
    QFile::remove(autosave);
    runAndKill(-1);
    if (QTest::currentTestFailed()) return;
    m_window->setAutosaveFile(autosave);
    const auto noAutosave = qScopeGuard([this] { m_window->setAutosaveFile(QString()); });
    auto* box = openRestoreOffer();
    QVERIFY(box);
    QVERIFY(box->text().contains(QStringLiteral("2 messages")));
    QSignalSpy loaded(m_window.get(), &MainWindow::conversationLoaded);
    box->button(QMessageBox::Open)->click();
    QVERIFY(loaded.wait(kTurnTimeoutMs));
    QCOMPARE(m_window->conversation()->messageCount(), 2);
  }

  // Ctrl+C of the real application with a message being written (issue 21's standard: nothing the
  // user typed is lost): the Studio puts the message kept from the last run back into its input
  // (else the sample question would replace it), then SIGINT closes it as the close button does
  // (exit 130, its settings written) with the message still kept for the next start.
  void aStudioStoppedByCtrlCKeepsTheMessageBeingWritten() {
    const StudioHome home;
    QVERIFY(home.dir.isValid());
    const QString draft = home.autosaved(QStringLiteral("draft.json"));
    const QString typed = QStringLiteral("How many stars are there?");
    keepDraft(draft, typed);
    const QDateTime before = QFileInfo(draft).lastModified();
    QTest::qWait(20);
    QProcess studio;
    studio.setProcessEnvironment(home.env());
    studio.start(QStringLiteral(TRIMKV_STUDIO_PATH), {QStringLiteral("--model"), QStringLiteral(TRIMKV_DEMO_MODEL_DIR),
                                                      QStringLiteral("--threads"), QStringLiteral("1")});
    QVERIFY(studio.waitForStarted(10000));
    // Put back into the input once the model is loaded, and so written again a moment later.
    QTRY_VERIFY_WITH_TIMEOUT(QFileInfo(draft).lastModified() > before, kLoadTimeoutMs);
    QCOMPARE(studio.state(), QProcess::Running);
    QVERIFY(::kill(static_cast<pid_t>(studio.processId()), SIGINT) == 0);
    QVERIFY(studio.waitForFinished(10000));
    QCOMPARE(studio.exitStatus(), QProcess::NormalExit);
    QCOMPARE(studio.exitCode(), 128 + SIGINT);
    QVERIFY(QFileInfo::exists(home.dir.filePath(QStringLiteral("config/TrimKV/TrimKV Studio.conf"))));
    const std::vector<trimkv::Message> kept = loadConversationFile(draft);
    QCOMPARE(static_cast<int>(kept.size()), 1);
    QCOMPARE(static_cast<int>(kept[0].content.size()), 2);
    QCOMPARE(QImage(QString::fromStdString(kept[0].content[0].path)), QImage(kImage));
    QCOMPARE(QString::fromStdString(kept[0].content[1].text), typed);
  }

  void theScreenshotModeSavesTheWindowWithTheInspector() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const QString path = dir.filePath(QStringLiteral("shot.png"));
    MainWindow window;
    window.resize(1000, 700);
    window.show();
    ScreenshotRun run(&window, path);
    QSignalSpy finished(&run, &ScreenshotRun::finished);
    run.start(qEnvironmentVariable("TRIMKV_DEMO_MODEL", QString::fromStdString(trimkv::default_model_dir())));
    QVERIFY(finished.wait(kTurnTimeoutMs));
    QCOMPARE(finished.first().at(0).toInt(), 0);
    QVERIFY(window.lastFrame().kv && window.lastFrame().kv->total_entries > 0);
    const QImage shot(path);
    QVERIFY(!shot.isNull());
    QCOMPARE(shot.size(), window.size() * window.devicePixelRatio());
    // Not blank: many distinct colours (text, grid cells, the image).
    QSet<QRgb> colours;
    for (int y = 0; y < shot.height(); y += 3)
      for (int x = 0; x < shot.width(); x += 3) colours.insert(shot.pixel(x, y));
    QVERIFY2(colours.size() > 50, qPrintable(QString::number(colours.size())));
  }

  void theGenerationFormSetsTheNextAnswersLength() {
    auto* maxTokens = m_window->generationSettings()->findChild<QSpinBox*>();
    QVERIFY(maxTokens);
    QCOMPARE(maxTokens->value(), 48);  // shows what setGenerationParams set
    maxTokens->setValue(5);
    QCOMPARE(m_window->generationSettings()->params().stop_at_eos, false);  // kept from before
    const TurnStats stats = answer(QStringLiteral("Short, please."), {});
    QCOMPARE(stats.generatedTokens, int64_t{5});
    QCOMPARE(stats.stopReason, QStringLiteral("max_tokens"));
  }

  void theSystemPromptOpensTheNextConversationAndIsSaved() {
    newConversation();
    m_window->setSystemPrompt(QStringLiteral("You answer briefly."));
    QCOMPARE(m_window->systemPromptPanel()->text(), QStringLiteral("You answer briefly."));
    answer(QStringLiteral("Hi."), {});
    ConversationView* view = m_window->conversation();
    QVERIFY(view->hasSystemMessage());
    QCOMPARE(view->entries().front().text, QStringLiteral("You answer briefly."));
    QCOMPARE(view->messageCount(), 2);
    QCOMPARE(m_window->lastFrame().state.turns, 3);  // system, user, assistant

    // A change waits for the next conversation: the next turn keeps the one in use.
    m_window->setSystemPrompt(QStringLiteral("You answer in French."));
    QVERIFY(m_window->systemPromptPanel()->note().contains(QStringLiteral("next new conversation")));
    answer(QStringLiteral("Again."), {});
    QCOMPARE(m_window->lastFrame().state.turns, 5);
    QCOMPARE(view->entries().front().text, QStringLiteral("You answer briefly."));

    // Saved as the first message of the JSON; opening it brings it back.
    QTemporaryDir dir;
    const QString path = dir.filePath(QStringLiteral("chat.json"));
    QSignalSpy saved(m_window.get(), &MainWindow::conversationSaved);
    m_window->saveConversation(path);
    QVERIFY(saved.wait(kEventTimeoutMs));
    QFile file(path);
    QVERIFY(file.open(QIODevice::ReadOnly));
    const QJsonArray messages = QJsonDocument::fromJson(file.readAll()).object().value("messages").toArray();
    QCOMPARE(messages.size(), 5);
    QCOMPARE(messages[0].toObject().value("role").toString(), QStringLiteral("system"));
    QCOMPARE(messages[0].toObject().value("content").toArray()[0].toObject().value("text").toString(),
             QStringLiteral("You answer briefly."));

    newConversation();
    answer(QStringLiteral("Hi."), {});
    QCOMPARE(view->entries().front().text, QStringLiteral("You answer in French."));
    QSignalSpy loaded(m_window.get(), &MainWindow::conversationLoaded);
    m_window->loadConversation(path);
    QVERIFY(loaded.wait(kTurnTimeoutMs));
    QCOMPARE(view->entries().front().text, QStringLiteral("You answer briefly."));
    QCOMPARE(view->messageCount(), 4);
    QTRY_COMPARE(m_window->lastFrame().state.turns, 5);

    // Cleared: the next conversation has none.
    m_window->setSystemPrompt(QString());
    newConversation();
    answer(QStringLiteral("Hi."), {});
    QVERIFY(!view->hasSystemMessage());
    QCOMPARE(m_window->lastFrame().state.turns, 2);
  }

  void editingAUserTurnResendsItAndDropsWhatFollowed() {
    newConversation();
    answer(QStringLiteral("First question"), {kImage});
    answer(QStringLiteral("Second question"), {});
    ConversationView* view = m_window->conversation();
    QCOMPARE(view->messageCount(), 4);
    // The view offers an Edit link per user message.
    const QString link = ConversationView::editLink(0).toString();
    bool found = false;
    for (QTextBlock b = view->document()->begin(); b.isValid() && !found; b = b.next())
      for (auto it = b.begin(); !it.atEnd(); ++it)
        if (it.fragment().charFormat().anchorHref() == link) found = true;
    QVERIFY(found);
    Q_EMIT view->anchorClicked(ConversationView::editLink(0));  // as a click on it does
    QCOMPARE(m_window->editingTurn(), 0);
    QCOMPARE(m_window->input()->toPlainText(), QStringLiteral("First question"));
    QCOMPARE(m_window->attachments(), QStringList{kImage});
    QCOMPARE(m_window->sendButton()->text(), QStringLiteral("Resend"));

    m_window->input()->setPlainText(QStringLiteral("Edited question"));
    QSignalSpy finished(m_window.get(), &MainWindow::answerFinished);
    m_window->sendButton()->click();
    QVERIFY(finished.wait(kTurnTimeoutMs));
    QCOMPARE(m_window->editingTurn(), -1);
    QCOMPARE(view->messageCount(), 2);
    QCOMPARE(view->userMessage(0).text, QStringLiteral("Edited question"));
    QCOMPARE(view->userMessage(0).images, QStringList{kImage});
    QCOMPARE(view->lastAnswer(), finished.first().at(0).value<TurnStats>().text);
    const InspectorFrame& f = m_window->lastFrame();
    QCOMPARE(f.state.turns, 2);
    QCOMPARE(static_cast<int>(f.state.images.size()), 1);

    // Editing the second of two turns keeps the first one's answer as it was.
    answer(QStringLiteral("Another one"), {});
    const QString firstAnswer = view->entries().at(1).text;
    m_window->editUserTurn(1);
    QCOMPARE(m_window->input()->toPlainText(), QStringLiteral("Another one"));
    m_window->cancelEdit();
    QCOMPARE(m_window->sendButton()->text(), QStringLiteral("Send"));
    m_window->resendUserTurn(1, QStringLiteral("Something else"), {});
    QVERIFY(finished.wait(kTurnTimeoutMs));
    QCOMPARE(view->messageCount(), 4);
    QCOMPARE(view->entries().at(1).text, firstAnswer);
    QCOMPARE(view->userMessage(1).text, QStringLiteral("Something else"));
    QCOMPARE(m_window->lastFrame().state.turns, 4);

    // A resend the engine refuses (unreadable image) leaves the conversation as it was.
    QSignalSpy failed(m_window.get(), &MainWindow::turnFailed);
    m_window->resendUserTurn(0, QStringLiteral("Look"), {kNotAnImage});
    QVERIFY(failed.wait(kTurnTimeoutMs));
    QCOMPARE(view->messageCount(), 4);
    QCOMPARE(view->userMessage(0).text, QStringLiteral("Edited question"));
    QTRY_COMPARE(m_window->lastFrame().state.turns, 4);
    for (QMessageBox* box : m_window->findChildren<QMessageBox*>()) box->accept();
  }

  void budgetUnitsConvertThroughOneFunction() {
    BudgetScale scale;
    scale.heads = 4;
    scale.bytesPerEntry = 256;
    scale.contextTokens = 400;
    QCOMPARE(unitsPerEntry(BudgetUnit::EntriesPerHead, scale), 1.0);
    QCOMPARE(budgetInUnit(100, BudgetUnit::MiB, scale), 100.0 * 4 * 256 / (1024.0 * 1024.0));
    QCOMPARE(budgetInUnit(100, BudgetUnit::PercentOfContext, scale), 25.0);
    QCOMPARE(entriesFromUnit(25.0, BudgetUnit::PercentOfContext, scale), int64_t{100});
    QCOMPARE(entriesFromUnit(0.01, BudgetUnit::PercentOfContext, scale), int64_t{1});  // never 0
    // Every whole budget survives the round trip through every unit.
    for (BudgetUnit u : {BudgetUnit::EntriesPerHead, BudgetUnit::MiB, BudgetUnit::PercentOfContext})
      for (int64_t m = 1; m <= 5000; m += 7) QCOMPARE(entriesFromUnit(budgetInUnit(m, u, scale), u, scale), m);
    QVERIFY(budgetText(512, BudgetUnit::MiB, scale).endsWith(QStringLiteral("KiB")));  // 0.5 MiB reads as KiB
    scale.contextTokens = 0;
    QVERIFY(!unitAvailable(BudgetUnit::PercentOfContext, scale));
    QVERIFY(unitAvailable(BudgetUnit::MiB, scale));

    // The scale of the loaded model: bytes per entry as the cache stores them.
    const InspectorFrame& f = m_window->lastFrame();
    QVERIFY(f.kv && f.kv->total_entries > 0);
    const BudgetScale live = BudgetScale::of(m_window->model().info, f.kv.get());
    QCOMPARE(live.heads, m_window->model().info.n_layer * m_window->model().info.n_kv_head);
    QCOMPARE(live.bytesPerEntry * static_cast<double>(f.kv->total_entries), static_cast<double>(f.kv->bytes_held));
    QCOMPARE(live.contextTokens, f.kv->n_tokens);
  }

  void theBudgetReadsAlikeInEveryUnitAndSliderAndSpinBoxAgree() {
    BudgetControl* control = m_window->budgetControl();
    setBudget(40);
    const BudgetScale scale = control->scale();
    QVERIFY(unitAvailable(BudgetUnit::PercentOfContext, scale));  // a conversation is on screen
    QVERIFY(control->hintText().contains(QStringLiteral("%")));

    // MiB: the spin box shows the same 40 entries; typing a size sends the matching entries.
    control->setUnit(BudgetUnit::MiB);
    QCOMPARE(control->unit(), BudgetUnit::MiB);
    QVERIFY(qAbs(control->spinBox()->value() - budgetInUnit(40, BudgetUnit::MiB, scale)) <
             1.01 * qPow(10.0, -control->spinBox()->decimals()));
    QVERIFY(control->hintText().contains(QStringLiteral("40 entries/head")));
    QSignalSpy applied(m_window.get(), &MainWindow::evictionApplied);
    control->spinBox()->setValue(budgetInUnit(20, BudgetUnit::MiB, scale));
    QVERIFY(applied.wait(kEventTimeoutMs));
    QCOMPARE(*applied.takeLast().at(0).value<trimkv::EvictionSettings>().budget_per_head, int64_t{20});
    QCOMPARE(control->entriesPerHead(), int64_t{20});

    // Percent of the context: half the tokens so far.
    control->setUnit(BudgetUnit::PercentOfContext);
    control->spinBox()->setValue(50.0);
    QVERIFY(applied.wait(kEventTimeoutMs));
    const int64_t half = entriesFromUnit(50.0, BudgetUnit::PercentOfContext, scale);
    QCOMPARE(half, (scale.contextTokens + 1) / 2);
    QCOMPARE(*applied.takeLast().at(0).value<trimkv::EvictionSettings>().budget_per_head, half);

    // The slider moves the same budget (logarithmic), and the spin box follows it.
    control->slider()->setValue(control->slider()->value() / 2);
    QVERIFY(applied.wait(kEventTimeoutMs));
    const int64_t fromSlider = control->entriesPerHead();
    QCOMPARE(*applied.takeLast().at(0).value<trimkv::EvictionSettings>().budget_per_head, fromSlider);
    QCOMPARE(entriesFromUnit(control->spinBox()->value(), BudgetUnit::PercentOfContext, scale), fromSlider);
    control->setUnit(BudgetUnit::EntriesPerHead);
    QCOMPARE(static_cast<int64_t>(control->spinBox()->value()), fromSlider);
  }

  void policyOptionsShowOnlyWhatThePolicyAccepts() {
    QComboBox* policy = m_window->policyCombo();
    const QString before = policy->currentData().toString();
    auto choose = [&](const QString& name) { QVERIFY(choosePolicy(*m_window, name)); };
    PolicyOptionsForm* form = m_window->policyOptions();
    setBudget(64);  // snapkv needs more than its window (32) per head
    choose(QStringLiteral("snapkv"));
    QCOMPARE(form->optionNames(), (QStringList{"window", "kernel", "pooling"}));
    QSignalSpy applied(m_window.get(), &MainWindow::evictionApplied);
    auto* window = qobject_cast<QSpinBox*>(form->editor(QStringLiteral("window")));
    QVERIFY(window);
    window->setValue(4);
    QVERIFY(applied.wait(kEventTimeoutMs));
    const auto s = applied.takeLast().at(0).value<trimkv::EvictionSettings>();
    QCOMPARE(s.policy, std::string("snapkv"));
    QCOMPARE(s.options, std::vector<std::string>{"window=4"});
    // A value the engine refuses is named in the error and the settings in force stay.
    QSignalSpy errors(m_window.get(), &MainWindow::errorReported);
    auto* kernel = qobject_cast<QSpinBox*>(form->editor(QStringLiteral("kernel")));
    kernel->setValue(4);  // must be odd
    QVERIFY(errors.wait(kEventTimeoutMs));
    QVERIFY(errors.first().at(1).toString().contains(QStringLiteral("kernel")));
    for (QMessageBox* box : m_window->findChildren<QMessageBox*>()) box->accept();

    choose(QStringLiteral("streamingllm"));
    QCOMPARE(form->optionNames(), (QStringList{"sinks", "window"}));
    QVERIFY(form->options().empty());  // all at their defaults (window: auto)
    QVERIFY(!form->editor(QStringLiteral("window"))->isEnabled());
    choose(before);
    QVERIFY(form->options().empty());
  }

  void replayRerunsTheConversationUnderTheNewBudget() {
    setBudget(48);
    newConversation();
    answer(QStringLiteral("What is in the image?"), {kImage});
    answer(QStringLiteral("And the colours?"), {});
    ConversationView* view = m_window->conversation();
    QCOMPARE(view->messageCount(), 4);
    const int64_t entriesHigh = m_window->lastFrame().state.kv_entries;
    setBudget(8);
    QSignalSpy replayed(m_window->worker(), &SessionWorker::answerReplayed);
    QSignalSpy finished(m_window.get(), &MainWindow::answerFinished);
    m_window->replayConversation();
    QVERIFY(finished.wait(kTurnTimeoutMs));
    QCOMPARE(replayed.count(), 1);  // the first answer; the last one finishes the replay
    QCOMPARE(view->messageCount(), 4);
    QCOMPARE(view->userMessage(0).text, QStringLiteral("What is in the image?"));
    QCOMPARE(view->userMessage(0).images, QStringList{kImage});
    QCOMPARE(view->userMessage(1).text, QStringLiteral("And the colours?"));
    const InspectorFrame& f = m_window->lastFrame();
    QCOMPARE(f.state.turns, 4);
    QVERIFY(f.state.kv_entries < entriesHigh);
    QVERIFY(f.trace);
    const auto& info = m_window->model().info;
    QCOMPARE(f.trace->budget_global, int64_t{8} * info.n_layer * info.n_kv_head);
    QVERIFY(f.state.eviction_events > 0);
  }

  void theScrubberShowsAPastStepInTheGridStripAndOverlay() {
    setBudget(8);
    newConversation();
    answer(QStringLiteral("What is in the image?"), {kImage});
    answer(QStringLiteral("And now?"), {});
    const FrameHistory& history = m_window->history();
    QVERIFY2(history.size() >= 3, qPrintable(QString::number(history.size())));
    for (int i = 1; i < history.size(); ++i) QVERIFY(history.at(i).kv->step > history.at(i - 1).kv->step);
    QSlider* scrubber = m_window->scrubber();
    QVERIFY(!m_window->isScrubbing());
    QCOMPARE(scrubber->maximum(), history.size() - 1);
    QCOMPARE(scrubber->value(), scrubber->maximum());

    // Back to the first stop where the image is in the cache.
    int k = -1;
    for (int i = 0; i + 1 < history.size() && k < 0; ++i)
      if (!history.at(i).state.images.empty()) k = i;
    QVERIFY(k >= 0);
    const InspectorFrame past = history.at(k);
    QVERIFY(past.kv->step < m_window->lastFrame().kv->step);
    scrubber->setValue(k);
    QVERIFY(m_window->isScrubbing());
    QCOMPARE(m_window->shownFrame().kv, past.kv);
    HeadGrid* grid = m_window->headGrid();
    for (int l = 0; l < grid->layerCount(); ++l)
      for (int h = 0; h < grid->headCount(); ++h) QVERIFY(grid->cellCounts(l, h) == past.kv->head(l, h).counts);
    const trimkv::HeadSnapshot& head = past.kv->head(grid->selectedLayer(), grid->selectedHead());
    QCOMPARE(m_window->headStrip()->keptCount(), static_cast<int>(head.entries.size()));
    int keptPatches = 0;
    for (const auto& e : head.entries)
      if (e.modality == trimkv::Modality::Image && e.image_id == past.state.images.back().image_id) ++keptPatches;
    QCOMPARE(m_window->imageOverlay()->keptPatchCount(), keptPatches);
    QCOMPARE(m_window->timeline()->marker(), past.kv->step);

    // New frames extend the history but leave the view where the user put it.
    const int before = history.size();
    answer(QStringLiteral("More?"), {});
    QVERIFY(history.size() > before);
    QVERIFY(m_window->isScrubbing());
    QCOMPARE(m_window->shownFrame().kv, past.kv);

    // Live again: the newest frame, no marker.
    m_window->scrubTo(history.size() - 1);
    QVERIFY(!m_window->isScrubbing());
    QCOMPARE(m_window->shownFrame().kv, m_window->lastFrame().kv);
    QCOMPARE(m_window->timeline()->marker(), int64_t{-1});
    // A new conversation starts a new history.
    newConversation();
    QCOMPARE(history.size(), 1);
  }

  void theGuiAnswersAsChatEngineAndTheCommandLineDo() {
    // Same image, question and settings: greedy, 12 tokens, no system prompt, the model's default
    // policy (not "full").
    m_window->setSystemPrompt(QString());
    trimkv::GenerationParams params;
    params.max_new_tokens = 12;
    params.stop_at_eos = false;
    m_window->setGenerationParams(params);
    const QString question = QStringLiteral("What is in the image?");
    const QString policy = QString::fromStdString(m_window->eviction().policy);
    QVERIFY(policy != QStringLiteral("full"));
    // `trimkv generate --chat` on the same folder, image, question and settings, as a user runs it.
    const auto runCli = [&](int budget) {
      QProcess cli;
      cli.start(QStringLiteral(TRIMKV_CLI_PATH),
                {"generate", "--model", m_window->model().dir, "--image", kImage, "--prompt", question, "--chat",
                 "--max-new-tokens", "12", "--ignore-eos", "--policy", policy, "--budget", QString::number(budget),
                 "--json"});
      if (!cli.waitForFinished(kTurnTimeoutMs) || cli.exitStatus() != QProcess::NormalExit || cli.exitCode() != 0) {
        qWarning("trimkv generate failed: %s", cli.readAllStandardError().constData());
        return QJsonObject();
      }
      return QJsonDocument::fromJson(cli.readAllStandardOutput().trimmed().split('\n').last()).object();
    };
    const auto idList = [](const QJsonValue& v) {
      QList<int> ids;
      for (const QJsonValue& x : v.toArray()) ids << x.toInt(-1);
      return ids;
    };
    // The ids of the Studio's conversation (prompt, then the answer) as its inspector holds them.
    const auto guiIds = [&] {
      QList<int> ids;
      if (m_window->lastFrame().tokens)
        for (const auto& t : *m_window->lastFrame().tokens) ids << t.id;
      return ids;
    };

    // 1. Against Hugging Face transformers. The fixture's "studio_turn" (tests/oracle/vlm_fixtures.py)
    // is this turn laid out by the checkpoint's own processor (its chat template, image splitting on)
    // and transformers' greedy answer of 12 tokens that never stops at EOS. With a budget the whole
    // turn fits in, the policy is in force but evicts nothing: the Studio and the command line must
    // give exactly HF's prompt ids, answer ids and text.
    QList<int> hfPrompt;
    const bool onFixture = QFileInfo(m_window->model().dir).canonicalFilePath() ==
                           QFileInfo(QStringLiteral(TRIMKV_TEST_DATA_DIR "/vlm/idefics3")).canonicalFilePath();
    if (!onFixture) {
      qInfo("not compared with transformers: the model is not the idefics3 fixture (%s)",
            qPrintable(m_window->model().dir));
    } else {
      QFile file(QStringLiteral(TRIMKV_TEST_DATA_DIR "/vlm/idefics3/expected.json"));
      QVERIFY(file.open(QIODevice::ReadOnly));
      const QJsonObject hf =
          QJsonDocument::fromJson(file.readAll()).object().value("cases").toObject().value("studio_turn").toObject();
      QVERIFY2(!hf.isEmpty(), "the idefics3 fixture has no studio_turn case");
      // The fixture's turn is this one: the image, then the question; no system message.
      const QJsonArray messages = hf.value("messages").toArray();
      QCOMPARE(messages.size(), 1);
      const QJsonArray content = messages.at(0).toObject().value("content").toArray();
      QCOMPARE(content.size(), 2);
      QCOMPARE(content.at(0).toObject().value("type").toString(), QStringLiteral("image"));
      QCOMPARE(content.at(1).toObject().value("text").toString(), question);
      QCOMPARE(hf.value("images").toArray().at(0).toString(), QFileInfo(kImage).fileName());
      hfPrompt = idList(hf.value("input_ids"));
      const QList<int> hfAnswer = idList(hf.value("greedy"));
      const QString hfText = hf.value("greedy_text").toString();
      QCOMPARE(static_cast<int>(hfAnswer.size()), params.max_new_tokens);
      // Exact ids are a fair demand only where no step is a near tie: test_vision holds our logits
      // to HF's within 1e-4, and the smallest top-1 / top-2 gap of HF's answer is far above that.
      const double margin = hf.value("greedy_margin").toDouble();
      QVERIFY2(margin > 1e-3, qPrintable(QString::number(margin)));
      const int fits = static_cast<int>(hfPrompt.size() + hfAnswer.size()) + 8;  // the turn, and room

      setBudget(fits);
      newConversation();
      const TurnStats gui = answer(question, {kImage});
      QCOMPARE(gui.generatedTokens, int64_t{12});
      QCOMPARE(QString::fromStdString(m_window->lastFrame().state.policy), policy);
      QCOMPARE(m_window->lastFrame().state.eviction_events, int64_t{0});
      const QList<int> ids = guiIds();
      QVERIFY2(ids.size() >= hfPrompt.size() + hfAnswer.size(), qPrintable(QString::number(ids.size())));
      QCOMPARE(ids.mid(0, hfPrompt.size()), hfPrompt);
      QCOMPARE(ids.mid(hfPrompt.size(), hfAnswer.size()), hfAnswer);
      QCOMPARE(gui.text, hfText);

      const QJsonObject out = runCli(fits);
      QVERIFY(!out.isEmpty());
      QCOMPARE(out.value("policy").toString(), policy);
      QCOMPARE(out.value("eviction_events").toInt(-1), 0);
      QCOMPARE(idList(out.value("prompt_ids")), hfPrompt);
      QCOMPARE(idList(out.value("tokens")), hfAnswer);
      QCOMPARE(out.value("text").toString(), hfText);
    }

    // 2. Under eviction, 16 entries per head: no reference library evicts, so the three front ends
    // are held to each other (the prompt is still HF's: eviction does not change the layout).
    setBudget(16);
    trimkv::EvictionSettings eviction;
    eviction.policy = policy.toStdString();
    eviction.budget_per_head = 16;
    newConversation();
    const TurnStats gui = answer(question, {kImage});
    QCOMPARE(gui.generatedTokens, int64_t{12});
    QCOMPARE(QString::fromStdString(m_window->lastFrame().state.policy), policy);
    QCOMPARE(m_window->lastFrame().state.budget_global,
             int64_t{16} * m_window->model().info.n_layer * m_window->model().info.n_kv_head);
    QVERIFY(m_window->lastFrame().state.eviction_events > 0);
    if (onFixture) QCOMPARE(guiIds().mid(0, hfPrompt.size()), hfPrompt);

    // ChatEngine's one-shot generation (a conversation of its own, through the chat template).
    auto engine = trimkv::vision::ChatEngine::load(m_window->model().dir.toStdString());
    const trimkv::GenerationResult direct =
        engine->generate(question.toStdString(), {kImage.toStdString()}, params, eviction, /*chat_template=*/true);
    QCOMPARE(gui.text, QString::fromStdString(direct.text));

    // The command line.
    const QJsonObject out = runCli(16);
    QVERIFY(!out.isEmpty());
    QCOMPARE(out.value("text").toString(), gui.text);
    QCOMPARE(out.value("generated_tokens").toInt(), 12);
    QCOMPARE(out.value("policy").toString(), policy);
    QVERIFY(out.value("eviction_events").toInt() > 0);
  }

  void stopEndsGenerationWithin200ms() {
    newConversation();
    m_window->activateWindow();
    QVERIFY(QTest::qWaitForWindowActive(m_window.get()));
    m_window->input()->setFocus();
    trimkv::GenerationParams params;
    params.max_new_tokens = 900;
    params.stop_at_eos = false;
    m_window->setGenerationParams(params);
    // Stop as soon as the first decode frame is shown. The tiny fixture decodes its 900 tokens in
    // tens of milliseconds, so a turn can end on its own before a decode frame is shown or before
    // the stop lands; such a turn says nothing about stopping and the next one is tried (at most
    // 40: on a machine busy with other work, 8 tries all ended on their own twice in a row).
    qint64 ms = -1;
    for (int attempt = 0; attempt < 40 && ms < 0; ++attempt) {
      if (attempt > 0) newConversation();
      QSignalSpy finished(m_window.get(), &MainWindow::answerFinished);
      QElapsedTimer clock;
      bool stopped = false;
      bool finishedBeforeStop = false;
      const QMetaObject::Connection onFrame =
          connect(m_window.get(), &MainWindow::frameShown, m_window.get(), [&](const InspectorFrame& f) {
            if (stopped || f.phase != QStringLiteral("decode")) return;
            stopped = true;
            finishedBeforeStop = !finished.isEmpty();
            clock.start();
            QTest::keyClick(m_window->input(), Qt::Key_Escape);  // the Stop shortcut
          });
      m_window->sendTurn(QStringLiteral("Tell me a long story."), {});
      // A turn may also end before any decode frame is shown (frames are paced): then, too, it
      // says nothing about stopping.
      QTRY_VERIFY_WITH_TIMEOUT(stopped || !finished.isEmpty(), kTurnTimeoutMs);
      disconnect(onFrame);
      if (!stopped || finishedBeforeStop) {
        QTRY_VERIFY_WITH_TIMEOUT(!finished.isEmpty(), kEventTimeoutMs);
        continue;
      }
      if (finished.isEmpty()) QVERIFY(finished.wait(kEventTimeoutMs));  // returns as the signal arrives (QTRY polls)
      const qint64 took = clock.elapsed();
      const TurnStats stats = finished.takeFirst().at(0).value<TurnStats>();
      if (stats.stopReason == QStringLiteral("max_tokens") || stats.stopReason == QStringLiteral("context_full"))
        continue;  // it ended before the stop landed
      QCOMPARE(stats.stopReason, QStringLiteral("cancelled"));
      ms = took;
    }
    QVERIFY2(ms >= 0, "every turn ended before the stop landed");
    qInfo("stop took %lld ms", static_cast<long long>(ms));
    QVERIFY2(ms < kStopBoundMs, qPrintable(QStringLiteral("stop took %1 ms").arg(ms)));
    QVERIFY(m_window->sendButton()->isEnabled());
    QVERIFY(!m_window->stopButton()->isEnabled());
  }

  // Chooses `name` in w's policy list as the user does; true once the worker applied it.
  static bool choosePolicy(MainWindow& w, const QString& name) {
    QComboBox* policy = w.policyCombo();
    QSignalSpy applied(&w, &MainWindow::evictionApplied);
    policy->setCurrentIndex(policy->findData(name));
    Q_EMIT policy->activated(policy->currentIndex());  // as a choice in the list does
    return applied.wait(kEventTimeoutMs) &&
           applied.last().at(0).value<trimkv::EvictionSettings>().policy == name.toStdString();
  }

  // Shows `w` and opens `dir` in it; true once loaded and the model's default policy (its
  // gates', or h2o) applied after the load.
  static bool openWithItsPolicy(MainWindow& w, const QString& dir) {
    w.resize(1200, 800);
    w.show();
    QSignalSpy loaded(&w, &MainWindow::modelLoaded);
    QSignalSpy applied(&w, &MainWindow::evictionApplied);
    w.openModel(dir);
    return loaded.wait(kLoadTimeoutMs) &&
           QTest::qWaitFor([&] {
             return !applied.isEmpty() && applied.last().at(0).value<trimkv::EvictionSettings>().policy != "full";
           }, kEventTimeoutMs);
  }

  // A window on the built-in demo model with one thread, so that a 12,000-token prefill takes
  // seconds.
  static bool openDemoOnOneThread(MainWindow& w) {
    w.setThreads(1);
    return openWithItsPolicy(w, QStringLiteral(TRIMKV_DEMO_MODEL_DIR));
  }

  // Starts a request (`start`) that prefills for seconds, clicks Stop 300 ms in and returns the
  // milliseconds from the click to the request's end (taken when turnFailed arrives); -1 when
  // it was answered instead (a test failure is recorded).
  static qint64 stopAPrefill(MainWindow& w, const std::function<void()>& start, QString* message = nullptr) {
    QElapsedTimer clock;
    qint64 ms = -1;
    QString failure;
    bool answered = false;
    const QMetaObject::Connection failed = connect(&w, &MainWindow::turnFailed, &w, [&](const QString& message) {
      ms = clock.isValid() ? clock.elapsed() : -2;
      failure = message;
    });
    const QMetaObject::Connection finished =
        connect(&w, &MainWindow::answerFinished, &w, [&](const TurnStats&) { answered = true; });
    start();
    QTest::qWait(300);  // well inside the prefill
    if (ms != -1 || answered) {
      QTest::qFail("the request ended on its own before the stop", __FILE__, __LINE__);
      return -1;
    }
    clock.start();
    QTest::mouseClick(w.stopButton(), Qt::LeftButton);
    if (!QTest::qWaitFor([&] { return ms >= 0 || answered; }, kTurnTimeoutMs) || answered) {
      QTest::qFail("the stopped request ran to its answer", __FILE__, __LINE__);
      return -1;
    }
    disconnect(failed);
    disconnect(finished);
    qInfo("stopped %lld ms after Stop: %s", static_cast<long long>(ms), qPrintable(failure));
    if (message) *message = failure;
    return ms;
  }

  // Stop while a message is still being read in (issue 21: every long operation returns control
  // within 200 ms). (A stop inside a picture's encoding is timed by test_vision on a 1024-pixel
  // picture through the Qwen2-VL tower: the fixtures here encode in milliseconds.)
  void stopDuringAPrefillLandsWithin200ms() {
    MainWindow w;
    QVERIFY(openDemoOnOneThread(w));
    QString failure;
    const qint64 ms = stopAPrefill(w, [&] { w.sendTurn(kLongPrompt, {}); }, &failure);
    QVERIFY(ms >= 0);
    QCOMPARE(failure, QStringLiteral("Stopped before the answer started."));
    QVERIFY2(ms < kStopBoundMs, qPrintable(QStringLiteral("stop took %1 ms").arg(ms)));
    QCOMPARE(w.conversation()->messageCount(), 0);  // the conversation is as before the message
    QTRY_VERIFY(w.sendButton()->isEnabled());
  }

  // The same after earlier turns, and in a replay: the conversation goes back at once, without
  // prefilling the earlier turns again first (the next request does that, under its own stop),
  // and the next turn is answered as in a conversation that never had the stopped requests (under
  // the full cache, where rebuilding the cache from the kept turns equals having run them).
  void stopAfterEarlierTurnsOrInAReplayLandsWithin200ms() {
    MainWindow w;
    QVERIFY(openDemoOnOneThread(w));
    QVERIFY(choosePolicy(w, QStringLiteral("full")));
    const QString question = QStringLiteral("What colour is the circle?");
    // Two of these and the answers fit the demo model's 16,384 positions; each takes seconds.
    const QString longTurn = QStringLiteral("blue ").repeated(6000) + question;
    QSignalSpy finished(&w, &MainWindow::answerFinished);
    w.sendTurn(longTurn, {});  // a long first turn: replaying it takes seconds
    QVERIFY(finished.wait(kTurnTimeoutMs));
    const qint64 ms = stopAPrefill(w, [&] { w.sendTurn(longTurn, {}); });
    QVERIFY(ms >= 0);
    QVERIFY2(ms < kStopBoundMs, qPrintable(QStringLiteral("stop in a later turn took %1 ms").arg(ms)));
    QCOMPARE(w.conversation()->messageCount(), 2);
    QTRY_VERIFY(w.sendButton()->isEnabled());

    const qint64 replayMs = stopAPrefill(w, [&] { w.replayAction()->trigger(); });
    QVERIFY(replayMs >= 0);
    QVERIFY2(replayMs < kStopBoundMs, qPrintable(QStringLiteral("stop in a replay took %1 ms").arg(replayMs)));
    QCOMPARE(w.conversation()->messageCount(), 2);
    QTRY_VERIFY(w.sendButton()->isEnabled());

    // The next turn catches the cache up first: its answer and KV view are those of a window
    // that never saw the stopped requests.
    finished.clear();
    w.sendTurn(question, {});
    QVERIFY(finished.wait(kTurnTimeoutMs));
    const TurnStats after = finished.takeFirst().at(0).value<TurnStats>();
    const InspectorFrame shown = w.lastFrame();
    MainWindow plain;
    QVERIFY(openDemoOnOneThread(plain));
    QVERIFY(choosePolicy(plain, QStringLiteral("full")));
    QSignalSpy plainFinished(&plain, &MainWindow::answerFinished);
    plain.sendTurn(longTurn, {});
    QVERIFY(plainFinished.wait(kTurnTimeoutMs));
    plain.sendTurn(question, {});
    QVERIFY(plainFinished.wait(kTurnTimeoutMs));
    const TurnStats want = plainFinished.takeLast().at(0).value<TurnStats>();
    QCOMPARE(after.text, want.text);
    QCOMPARE(after.promptTokens, want.promptTokens);
    QVERIFY(shown.kv && plain.lastFrame().kv);
    QCOMPARE(shown.kv->n_tokens, plain.lastFrame().kv->n_tokens);
    QCOMPARE(shown.state.kv_entries, plain.lastFrame().state.kv_entries);
  }

  // Stop while a model loads: the load ends before its next tensor; the model in use stays.
  void stopDuringAModelLoadLandsWithin200ms() {
    MainWindow w;
    QVERIFY(openDemoOnOneThread(w));
    trimkv::test::ScratchDir dir("gui-big-model");
    trimkv::test::RandomLlama big;
    big.hidden = 512;
    big.mlp = 1536;
    big.layers = 24;  // hundreds of milliseconds of tensors to read
    big.with_tokenizer = true;
    trimkv::test::write_random_llama(dir, big);
    QElapsedTimer clock;
    QSignalSpy stopped(&w, &MainWindow::modelLoadStopped);
    QSignalSpy loaded(&w, &MainWindow::modelLoaded);
    connect(&w, &MainWindow::modelLoadStarted, &w, [&](const QString&) {
      QVERIFY(w.stopButton()->isEnabled());  // a load can be stopped
      clock.start();
      QTest::mouseClick(w.stopButton(), Qt::LeftButton);
    });
    w.openModel(QString::fromStdString(dir.path()));
    QVERIFY(stopped.wait(kLoadTimeoutMs));
    const qint64 ms = clock.elapsed();
    qInfo("the load stopped %lld ms after Stop", static_cast<long long>(ms));
    QVERIFY2(ms < kStopBoundMs, qPrintable(QStringLiteral("stop took %1 ms").arg(ms)));
    QVERIFY(loaded.isEmpty());
    QCOMPARE(w.model().dir, QStringLiteral(TRIMKV_DEMO_MODEL_DIR));  // the model in use stays
    QTRY_VERIFY(!w.stopButton()->isEnabled());
    QVERIFY(w.sendButton()->isEnabled());
  }

  void recentModelsListLoadedFoldersAndReloadWithABusyIndicator() {
    QCOMPARE(RecentModels::withItem({"/a", "/b", "/c"}, QStringLiteral("/b")), (QStringList{"/b", "/a", "/c"}));
    QStringList many;
    for (int i = 0; i < 12; ++i) many = RecentModels::withItem(many, QStringLiteral("/m%1").arg(i));
    QCOMPARE(many.size(), RecentModels::kMax);
    QCOMPARE(many.first(), QStringLiteral("/m11"));

    // The folder that loaded is listed; the bad one of an earlier test is not.
    const QString dir = QDir::cleanPath(QDir(m_window->model().dir).absolutePath());
    const QStringList recent = RecentModels::load();
    QCOMPARE(recent.value(0), dir);
    QVERIFY(!recent.contains(QStringLiteral("/nonexistent/model-folder")));

    // File > Open recent model offers it; choosing it loads it again, the busy indicator up
    // meanwhile (the load runs on the worker thread: the window keeps answering).
    QMenu* menu = m_window->recentMenu();
    Q_EMIT menu->aboutToShow();
    QAction* entry = nullptr;
    for (QAction* a : menu->actions())
      if (a->toolTip() == dir) entry = a;
    QVERIFY(entry);
    bool indicatorShown = false;
    // Disconnected before this function returns: later loads must not write to its locals (ASan
    // found the first version's connection outliving them).
    const QMetaObject::Connection watch = connect(m_window.get(), &MainWindow::modelLoadStarted, this,
                                                  [&] { indicatorShown = m_window->loadIndicator()->isVisible(); });
    QSignalSpy loaded(m_window.get(), &MainWindow::modelLoaded);
    entry->trigger();
    const bool arrived = loaded.wait(kLoadTimeoutMs);
    disconnect(watch);
    QVERIFY(arrived);
    QVERIFY(indicatorShown);
    QTRY_VERIFY(!m_window->loadIndicator()->isVisible());
  }

  // --- issue 7, second part: Compare, mini evaluation, teaching, conversation list -----------

  void compareShowsTwoSettingsSideBySideOnItsOwnEngine() {
    trimkv::GenerationParams params;
    params.max_new_tokens = 12;
    params.stop_at_eos = false;
    m_window->setGenerationParams(params);
    newConversation();
    {  // An empty conversation has nothing to compare: said so, and the window is ready again.
      QSignalSpy errors(m_window.get(), &MainWindow::errorReported);
      QSignalSpy done(m_window->compareWindow(), &CompareWindow::finished);
      m_window->compareWindow()->start();
      QTRY_COMPARE_WITH_TIMEOUT(done.size(), 1, kEventTimeoutMs);
      QCOMPARE(done.first().at(0).toBool(), true);
      QVERIFY(!errors.isEmpty() && errors.first().at(1).toString().contains(QStringLiteral("no message")));
      QVERIFY(!m_window->compareWindow()->isRunning());
      for (QMessageBox* box : m_window->findChildren<QMessageBox*>()) box->accept();
    }
    answer(QStringLiteral("What is in the image?"), {kImage});
    answer(QStringLiteral("And the colour?"), {});
    const int messages = m_window->conversation()->messageCount();
    const int64_t chatTokens = m_window->lastFrame().state.tokens;
    QCOMPARE(messages, 4);

    QVERIFY(m_window->compareAction()->isEnabled());
    m_window->compareAction()->trigger();
    CompareWindow* cw = m_window->compareWindow();
    QVERIFY(cw->isVisible());
    // It opens on the full cache (A) against what the chat runs under (B).
    const std::string chatPolicy = m_window->lastFrame().state.policy;
    QCOMPARE(cw->side(0).policy, std::string("full"));
    QCOMPARE(cw->side(1).policy, chatPolicy == "full" ? std::string("h2o") : chatPolicy);
    trimkv::EvictionSettings full;
    full.policy = "full";
    trimkv::EvictionSettings small;
    small.policy = "h2o";
    small.budget_per_head = 4;
    // A side's policy options: the chat's own form, in an Options menu per side.
    trimkv::EvictionSettings snap;
    snap.policy = "snapkv";
    snap.options = {"window=4"};
    snap.budget_per_head = 8;
    cw->setSide(1, snap);
    QCOMPARE(cw->side(1).options, std::vector<std::string>{"window=4"});
    auto* window = qobject_cast<QSpinBox*>(cw->optionsForm(1)->editor(QStringLiteral("window")));
    QVERIFY(window);
    QCOMPARE(window->value(), 4);
    window->setValue(6);
    QCOMPARE(cw->side(1).options, std::vector<std::string>{"window=6"});
    cw->setSide(0, full);
    cw->setSide(1, small);
    QVERIFY(cw->side(1).options.empty());
    QCOMPARE(cw->side(1).policy, std::string("h2o"));
    QCOMPARE(*cw->side(1).budget_per_head, int64_t{4});
    QVERIFY(!cw->side(0).budget_per_head.has_value());

    QSignalSpy finished(cw, &CompareWindow::finished);
    QTest::mouseClick(cw->runButton(), Qt::LeftButton);
    QVERIFY(cw->isRunning());
    QVERIFY(finished.wait(kTurnTimeoutMs));
    QCOMPARE(finished.takeFirst().at(0).toBool(), false);  // not cancelled
    QCOMPARE(cw->progressBar()->value(), cw->progressBar()->maximum());

    // Two answers per side, one per user turn: the answers an engine built here, apart from the
    // Studio's, gives under that side's settings (compressing at the budget: slack 0) to the same
    // turns; the answers that differ between the sides, and only those, are marked.
    trimkv::KvSnapshot apart[2];
    for (int side = 0; side < 2; ++side) {
      QCOMPARE(cw->answers(side).size(), 2);
      QVERIFY(cw->answerView(side)->toPlainText().contains(QStringLiteral("And the colour?")));
      auto engine = trimkv::vision::ChatEngine::load(m_window->model().dir.toStdString());
      trimkv::EvictionSettings s = cw->side(side);
      s.slack = 0;
      engine->set_eviction(s);
      engine->add_user_turn("What is in the image?", {kImage.toStdString()});
      const QString first = QString::fromStdString(engine->respond(params).text);
      engine->add_user_turn("And the colour?", {});
      const QString second = QString::fromStdString(engine->respond(params).text);
      QCOMPARE(cw->answers(side), (QStringList{first, second}));
      apart[side] = engine->snapshot();
    }
    int differing = 0;
    for (int t = 0; t < 2; ++t) differing += cw->answers(0)[t] != cw->answers(1)[t] ? 1 : 0;
    for (int side = 0; side < 2; ++side)
      QCOMPARE(cw->answerView(side)->toPlainText().count(QStringLiteral("differs from")), differing);
    // A: the full cache holds every position in every head; B: at most M = 4 per head.
    const InspectorFrame& a = cw->frame(0);
    const InspectorFrame& b = cw->frame(1);
    QVERIFY(a.kv && b.kv);
    QCOMPARE(a.kv->policy, std::string("full"));
    QCOMPARE(cw->grid(0)->layerCount(), static_cast<int>(m_window->model().info.n_layer));
    QCOMPARE(cw->grid(1)->headCount(), static_cast<int>(m_window->model().info.n_kv_head));
    for (int l = 0; l < cw->grid(0)->layerCount(); ++l)
      for (int h = 0; h < cw->grid(0)->headCount(); ++h) {
        QCOMPARE(cw->grid(0)->cellCounts(l, h).total(), a.kv->n_tokens);
        const int64_t kept = cw->grid(1)->cellCounts(l, h).total();
        QVERIFY2(kept >= 1 && kept <= 4, qPrintable(QStringLiteral("B head %1.%2 keeps %3").arg(l).arg(h).arg(kept)));
        QVERIFY(cw->grid(1)->cellCounts(l, h) == b.kv->head(l, h).counts);
        // ... and what the engines built apart above hold after the same two turns.
        for (int side = 0; side < 2; ++side) QVERIFY(cw->grid(side)->cellCounts(l, h) == apart[side].head(l, h).counts);
      }
    QVERIFY(b.kv->n_events > 0);

    // One click selects the head on both sides: strips and overlays follow.
    const int lastLayer = cw->grid(1)->layerCount() - 1;
    cw->grid(1)->setSelectedHead(lastLayer, 1);
    QCOMPARE(cw->grid(0)->selectedLayer(), lastLayer);
    QCOMPARE(cw->grid(0)->selectedHead(), 1);
    QCOMPARE(cw->strip(0)->keptCount(), static_cast<int>(a.kv->n_tokens));
    QCOMPARE(cw->strip(1)->keptCount(), static_cast<int>(b.kv->head(lastLayer, 1).entries.size()));
    QVERIFY(cw->overlay(0)->hasImage() && cw->overlay(1)->hasImage());
    QCOMPARE(cw->overlay(0)->keptPatchCount(), cw->overlay(0)->patchCount());
    QVERIFY(cw->overlay(1)->keptPatchCount() <= 4);

    // The chat is untouched.
    QCOMPARE(m_window->conversation()->messageCount(), messages);
    QCOMPARE(m_window->lastFrame().state.tokens, chatTokens);

    saveShot(cw, QStringLiteral("compare.png"));
    // Cancel ends a run promptly, and the window can run again afterwards (long answers: the run
    // must still be going when the click comes).
    params.max_new_tokens = 300;
    m_window->setGenerationParams(params);
    QueuedCount progress(m_window->analysisWorker(), &AnalysisWorker::progress, this);
    cw->start();
    QTRY_VERIFY_WITH_TIMEOUT(progress.n > 0, kEventTimeoutMs);
    QElapsedTimer clock;
    clock.start();
    QTest::mouseClick(cw->cancelButton(), Qt::LeftButton);
    QVERIFY(finished.wait(kEventTimeoutMs));
    const qint64 compareStopMs = clock.elapsed();
    QCOMPARE(finished.takeFirst().at(0).toBool(), true);
    qInfo("the comparison stopped %lld ms after Cancel", static_cast<long long>(compareStopMs));
    QVERIFY2(compareStopMs < kStopBoundMs, qPrintable(QString::number(compareStopMs)));
    QVERIFY(!cw->isRunning());
    QVERIFY(cw->runButton()->isEnabled());
    params.max_new_tokens = 12;
    m_window->setGenerationParams(params);
    // Closing the window while it runs cancels the run.
    cw->start();
    QVERIFY(cw->isRunning());
    cw->close();
    QTRY_COMPARE_WITH_TIMEOUT(finished.size(), 1, kEventTimeoutMs);  // may end at once: not started yet
    QCOMPARE(finished.takeFirst().at(0).toBool(), true);
    QVERIFY(!cw->isRunning());
  }

  // The figure that eval-sweep writes and the evaluation window shows (app/charts): round ticks
  // (1-2-5 per decade) in % of the full cache's peak along the bottom and the same ticks in
  // entries along the top, the legend ordered by the value at the smallest budget, the learned
  // policy thicker, the full cache dashed; without a full cache, entries along the bottom.
  void theBudgetChartHasRoundTicksBothUnitsAndAPaperPng() {
    const std::vector<budget_chart::Series> series = {
        {"h2o", {{1772, 0.80}, {354, 0.72}, {886, 0.79}}},
        {"dbtrimkv", {{354, 0.73}, {886, 0.79}, {1772, 0.80}}},
    };
    auto labelsOf = [](QChart& chart, Qt::Alignment side) {
      for (QAbstractAxis* a : chart.axes(Qt::Horizontal))
        if (a->alignment() == side) return qobject_cast<QCategoryAxis*>(a)->categoriesLabels();
      return QStringList();
    };
    QChart chart;
    budget_chart::draw(&chart, series, 0.798, 3544);
    QCOMPARE(labelsOf(chart, Qt::AlignBottom), (QStringList{"10%", "20%", "50%", "100%"}));
    QCOMPARE(labelsOf(chart, Qt::AlignTop), (QStringList{"354", "709", "1.8K", "3.5K"}));
    const QList<QAbstractSeries*> lines = chart.series();
    QCOMPARE(lines.size(), 4);  // full cache, the two policies best first, the top axis' holder
    QCOMPARE(lines[0]->name(), QStringLiteral("full cache (79.8%)"));
    QCOMPARE(qobject_cast<QLineSeries*>(lines[0])->pen().style(), Qt::DashLine);
    QCOMPARE(lines[1]->name(), QStringLiteral("dbtrimkv"));
    QCOMPARE(qobject_cast<QLineSeries*>(lines[1])->pen().width(), 4);
    QCOMPARE(lines[2]->name(), QStringLiteral("h2o"));
    QCOMPARE(qobject_cast<QLineSeries*>(lines[2])->pen().width(), 2);
    QCOMPARE(qobject_cast<QLineSeries*>(lines[2])->at(0), QPointF(std::log10(100.0 * 354 / 3544), 72.0));  // sorted
    auto* y = qobject_cast<QValueAxis*>(chart.axes(Qt::Vertical).at(0));
    QCOMPARE(y->min(), 60.0);
    QVERIFY(std::abs(y->max() - 100.0) < 1e-6);

    QChart noFull;
    budget_chart::draw(&noFull, series, std::nan(""), 0);
    QCOMPARE(noFull.series().size(), 2);
    QCOMPARE(labelsOf(noFull, Qt::AlignBottom), (QStringList{"500", "1K", "1.5K"}));

    const QImage png = QImage::fromData(budget_chart::png(series, 0.798, 3544));
    QCOMPARE(png.size(), QSize(960, 620));
    int red = 0, blue = 0;  // the series' own colours: h2o (series 0) red, dbtrimkv (1) blue
    for (int r = 0; r < png.height(); ++r)
      for (int c = 0; c < png.width(); ++c) {
        const QColor p = png.pixelColor(c, r);
        red += p == QColor(214, 39, 40);
        blue += p == QColor(31, 119, 180);
      }
    QVERIFY2(red > 200 && blue > 100, qPrintable(QStringLiteral("red %1 blue %2").arg(red).arg(blue)));
    const QString shots = qEnvironmentVariable("TRIMKV_GUI_SHOTS");
    if (!shots.isEmpty()) png.save(QDir(shots).filePath(QStringLiteral("budget-chart.png")));
  }

  void theMiniEvaluationTablesAndPlotsAccuracyAgainstBudgetAndCancels() {
    m_window->evaluateAction()->trigger();
    EvaluateWindow* ev = m_window->evaluateWindow();
    QVERIFY(ev->isVisible());
    ev->clearResults();
    ev->conversationsSpin()->setValue(2);
    ev->seedSpin()->setValue(3);
    QCOMPARE(ev->policyList()->findItems(QStringLiteral("full"), Qt::MatchExactly).size(), 0);  // always run
    QCOMPARE(ev->policyList()->findItems(QStringLiteral("h2o"), Qt::MatchExactly).size(), 1);
    ev->setCheckedPolicies({});
    QVERIFY(!ev->runButton()->isEnabled());  // no policy
    ev->setCheckedPolicies({QStringLiteral("h2o"), QStringLiteral("streamingllm")});
    QCOMPARE(ev->checkedPolicies(), (QStringList{"h2o", "streamingllm"}));
    ev->budgetsEdit()->setText(QStringLiteral("x, 4"));
    QVERIFY(!ev->runButton()->isEnabled());  // not a list of budgets
    ev->budgetsEdit()->setText(QStringLiteral("8, 4"));
    QCOMPARE(ev->budgets(), (QList<qint64>{4, 8}));

    // A budget a policy cannot take is refused before anything runs (streamingllm's 4 sinks need
    // more than 4 entries per head).
    QSignalSpy finished(ev, &EvaluateWindow::finished);
    QSignalSpy errors(m_window.get(), &MainWindow::errorReported);
    QTest::mouseClick(ev->runButton(), Qt::LeftButton);
    QVERIFY(finished.wait(kTurnTimeoutMs));
    QCOMPARE(finished.takeFirst().at(0).toBool(), true);
    QTRY_VERIFY(!errors.isEmpty());
    QVERIFY2(errors.first().at(1).toString().contains(QStringLiteral("sinks")), qPrintable(errors.first().at(1).toString()));
    QCOMPARE(ev->table()->rowCount(), 0);
    QVERIFY(ev->runButton()->isEnabled());
    for (QMessageBox* box : m_window->findChildren<QMessageBox*>()) box->accept();

    ev->budgetsEdit()->setText(QStringLiteral("16, 8"));
    QTest::mouseClick(ev->runButton(), Qt::LeftButton);
    QVERIFY(ev->isRunning());
    QVERIFY(finished.wait(4 * kTurnTimeoutMs));
    QCOMPARE(finished.takeFirst().at(0).toBool(), false);

    // Rows: the full cache, then each policy at 8 and at 16 entries per head.
    QTableWidget* table = ev->table();
    QCOMPARE(table->rowCount(), 5);
    QCOMPARE(table->item(3, 0)->text(), QStringLiteral("streamingllm"));
    QCOMPARE(table->item(4, 1)->text(), QStringLiteral("16"));
    QCOMPARE(table->item(0, 0)->text(), QStringLiteral("full"));
    QCOMPARE(table->item(1, 0)->text(), QStringLiteral("h2o"));
    QCOMPARE(table->item(1, 1)->text(), QStringLiteral("8"));
    QCOMPARE(table->item(2, 1)->text(), QStringLiteral("16"));
    const trimkv::ModelInfo& info = m_window->model().info;
    QCOMPARE(table->item(2, 2)->text(), QString::number(16 * info.n_layer * info.n_kv_head));
    const std::vector<EvalCell>& cells = ev->cells();
    QCOMPARE(cells.size(), size_t{5});
    for (const EvalCell& c : cells) {
      QVERIFY(c.n > 0);
      QCOMPARE(c.n, cells[0].n);  // every cell answers the same questions
      QCOMPARE(c.failures, qint64{0});
      QVERIFY(c.accuracy >= 0 && c.accuracy <= 1);
    }
    QVERIFY(cells[1].meanKvEntries < cells[0].meanKvEntries);  // a budget holds less than the full cache

    // The same cells by the command line, as a user would run them: the test set written by
    // `trimkv make-world` with the mini evaluation's seed and sizes, `trimkv eval` with the same
    // policy and budget: the same questions, answers and cache sizes.
    const EvalRequest req = ev->request();
    QTemporaryDir worldDir;
    auto cli = [](const QStringList& args) {
      QProcess p;
      p.start(QStringLiteral(TRIMKV_CLI_PATH), args);
      if (!p.waitForFinished(4 * kTurnTimeoutMs) || p.exitStatus() != QProcess::NormalExit || p.exitCode() != 0)
        qWarning() << "trimkv" << args << "failed:" << p.readAllStandardError();
      return p.readAllStandardOutput();
    };
    cli({"make-world", "--out", worldDir.path(), "--n", QString::number(req.conversations), "--seed",
         QString::number(req.seed), "--split", "test", "--max-images", QString::number(req.maxImages), "--max-turns",
         QString::number(req.maxTurns), "--quiet"});
    for (size_t i : {size_t{0}, size_t{1}, size_t{4}}) {  // full, h2o at 8, streamingllm at 16
      QStringList args = {"eval", "--model", m_window->model().dir, "--data", worldDir.filePath("test.jsonl"), "--json"};
      if (cells[i].policy != QLatin1String("full"))
        args << "--policy" << cells[i].policy << "--budget" << QString::number(cells[i].budgetPerHead);
      const QJsonObject out = QJsonDocument::fromJson(cli(args)).object();
      QVERIFY2(!out.isEmpty(), qPrintable(args.join(' ')));
      QCOMPARE(out.value("n").toInteger(), cells[i].n);
      QCOMPARE(out.value("correct").toInteger(), cells[i].correct);
      QCOMPARE(out.value("kv_peak_entries").toInteger(), cells[i].maxKvEntries);
      QCOMPARE(out.value("kv_mean_entries").toDouble(), cells[i].meanKvEntries);
    }

    // The plot (eval-sweep's figure, app/charts): the full cache's dashed reference and one line
    // per policy through its budgets, x = log10 of the budget as % of the full cache's peak, y in %;
    // the last series only holds the entries axis along the top.
    const QList<QAbstractSeries*> series = ev->chart()->series();
    QCOMPARE(series.size(), 4);
    auto* ref = qobject_cast<QLineSeries*>(series[0]);
    QVERIFY(ref);
    QCOMPARE(ref->pen().style(), Qt::DashLine);
    QVERIFY(ref->name().startsWith(QStringLiteral("full cache")));
    QLineSeries* line = nullptr;
    for (QAbstractSeries* s : series)
      if (s->name() == QLatin1String("h2o")) line = qobject_cast<QLineSeries*>(s);
    QVERIFY(line);
    QCOMPARE(line->count(), 2);
    const double percent = 100.0 * static_cast<double>(cells[1].budgetGlobal) / static_cast<double>(cells[0].maxKvEntries);
    QCOMPARE(line->at(0), QPointF(std::log10(percent), 100.0 * cells[1].accuracy));
    QCOMPARE(qobject_cast<QLineSeries*>(series[3])->count(), 0);

    // Exports: CSV with a header and one line per row; PNG that decodes.
    QTemporaryDir dir;
    const QString csv = dir.filePath(QStringLiteral("eval.csv"));
    const QString png = dir.filePath(QStringLiteral("eval.png"));
    QVERIFY(ev->exportCsv(csv));
    QVERIFY(ev->exportPlot(png));
    QFile f(csv);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QList<QByteArray> lines = f.readAll().trimmed().split('\n');
    QCOMPARE(lines.size(), 6);
    QVERIFY(lines[0].startsWith("policy,budget_per_head,budget_global,accuracy"));
    QVERIFY(lines[2].startsWith("h2o,8,"));
    QVERIFY(!QImage(png).isNull());
    saveShot(ev, QStringLiteral("evaluate.png"));

    // Cancel: a long run stops within moments and leaves the app usable.
    ev->conversationsSpin()->setValue(20);
    ev->setCheckedPolicies({QStringLiteral("h2o")});
    ev->budgetsEdit()->setText(QStringLiteral("2, 4, 8, 16"));
    QTest::mouseClick(ev->runButton(), Qt::LeftButton);
    QTRY_VERIFY_WITH_TIMEOUT(ev->progressBar()->maximum() > 1 && ev->progressBar()->value() >= 1, kTurnTimeoutMs);
    // One analysis job at a time: a comparison asked for meanwhile is refused, the evaluation goes on.
    errors.clear();
    QSignalSpy compareDone(m_window->compareWindow(), &CompareWindow::finished);
    m_window->compareWindow()->start();
    QCOMPARE(compareDone.size(), 1);
    QCOMPARE(compareDone.first().at(0).toBool(), true);
    QVERIFY(!errors.isEmpty() && errors.first().at(1).toString().contains(QStringLiteral("evaluation is running")));
    for (QMessageBox* box : m_window->findChildren<QMessageBox*>()) box->accept();
    QVERIFY(ev->isRunning());
    QElapsedTimer clock;
    clock.start();
    QTest::mouseClick(ev->cancelButton(), Qt::LeftButton);
    QVERIFY(finished.wait(kEventTimeoutMs));
    const qint64 evalStopMs = clock.elapsed();
    QCOMPARE(finished.takeFirst().at(0).toBool(), true);
    qInfo("the evaluation stopped %lld ms after Cancel", static_cast<long long>(evalStopMs));
    QVERIFY2(evalStopMs < kStopBoundMs, qPrintable(QString::number(evalStopMs)));
    QVERIFY(!ev->isRunning());
    QVERIFY(ev->runButton()->isEnabled());
    QCOMPARE(ev->table()->rowCount(), 5);  // the finished rows stay
    // Closing the window frees the analysis engine (the second copy of the model).
    QueuedCount released(m_window->analysisWorker(), &AnalysisWorker::engineReleased, this);
    ev->close();
    QTRY_VERIFY_WITH_TIMEOUT(released.n > 0, kEventTimeoutMs);
    const TurnStats stats = answer(QStringLiteral("Still there?"), {});
    QVERIFY(stats.generatedTokens > 0);
  }

  void termsAreExplainedWhereTheyAreShown() {
    const trimkv::ModelInfo& info = m_window->model().info;
    const int64_t m = m_window->budgetControl()->entriesPerHead();
    const QString budget = m_window->budgetControl()->whatsThis();
    QVERIFY(budget.contains(QStringLiteral("M_global = M·L·H_kv")));
    QVERIFY2(budget.contains(QStringLiteral("M_global = %1").arg(m * info.n_layer * info.n_kv_head)), qPrintable(budget));
    QVERIFY(budget.contains(QStringLiteral("each KV head of each layer")));
    QVERIFY(m_window->shadeCombo()->whatsThis().contains(QStringLiteral("β")));
    QVERIFY(m_window->policyCombo()->whatsThis().contains(QStringLiteral("β")));
    const QString grid = m_window->headGrid()->whatsThis();
    QVERIFY(grid.contains(ModalityPalette::text().name()) && grid.contains(ModalityPalette::image().name()));
    QVERIFY(m_window->headStrip()->whatsThis().contains(QStringLiteral("evicted")));
    QVERIFY(!m_window->imageOverlay()->whatsThis().isEmpty());
    QVERIFY(!m_window->headGrid()->toolTip().isEmpty());
  }

  void theGuidedTourStepsThroughEveryStepAndHighlightsItsWidget() {
    TourPanel* tour = m_window->tour();
    auto* tourAction = m_window->findChild<QAction*>(QStringLiteral("tourAction"));
    QVERIFY(tourAction);
    tourAction->trigger();
    QVERIFY(tour->isVisible());
    QCOMPARE(tour->stepCount(), 8);
    QCOMPARE(tour->currentStep(), 0);
    QVERIFY(!tour->backButton()->isEnabled());

    // Step 1's action sends the sample turn.
    const int before = m_window->conversation()->messageCount();
    QVERIFY(tour->actionButton()->isVisible());
    QSignalSpy finished(m_window.get(), &MainWindow::answerFinished);
    QTest::mouseClick(tour->actionButton(), Qt::LeftButton);
    QVERIFY(finished.wait(kTurnTimeoutMs));
    QCOMPARE(m_window->conversation()->messageCount(), before + 2);

    for (int i = 0; i < tour->stepCount(); ++i) {
      QCOMPARE(tour->currentStep(), i);
      QWidget* target = tour->currentTarget();
      QVERIFY2(target, qPrintable(QStringLiteral("step %1 has no widget").arg(i)));
      QVERIFY2(target->isVisible(), qPrintable(QStringLiteral("step %1's widget is hidden").arg(i)));
      QVERIFY(tour->highlight()->isVisible());
      QCOMPARE(tour->highlight()->target(), target);
      QVERIFY(!tour->geometry().intersects(onWindowRect(target)));  // the panel does not hide its widget
      QVERIFY(tour->height() >= tour->heightForWidth(tour->width()));  // its whole text shows
      const QRect onWindow(target->mapTo(m_window.get(), QPoint(0, 0)), target->size());
      QVERIFY(tour->highlight()->geometry().contains(onWindow));
      if (i == 3) saveShot(m_window.get(), QStringLiteral("tour.png"));
      if (i == 2) {  // "Click a head": its action selects one
        QTest::mouseClick(tour->actionButton(), Qt::LeftButton);
        QCOMPARE(m_window->headGrid()->selectedLayer(), m_window->headGrid()->layerCount() - 1);
      }
      if (i + 1 < tour->stepCount()) QTest::mouseClick(tour->nextButton(), Qt::LeftButton);
    }
    QTest::mouseClick(tour->backButton(), Qt::LeftButton);
    QCOMPARE(tour->currentStep(), tour->stepCount() - 2);
    QTest::mouseClick(tour->nextButton(), Qt::LeftButton);
    QCOMPARE(tour->nextButton()->text(), QStringLiteral("Finish"));
    QTest::mouseClick(tour->nextButton(), Qt::LeftButton);
    QVERIFY(!tour->isVisible());
    QVERIFY(!tour->highlight()->isVisible());
    // Close works from any step.
    tour->start();
    tour->next();
    QTest::mouseClick(tour->closeButton(), Qt::LeftButton);
    QVERIFY(!tour->isVisible());
  }

  void theConversationListOpensSavedAndAutosavedConversations() {
    QTemporaryDir dir;
    ConversationList* list = m_window->conversationList();
    QVERIFY(list->isVisible());
    const QString autosave = dir.filePath(QStringLiteral("autosave/conversation.json"));
    m_window->setAutosaveFile(autosave);
    QSignalSpy autosaved(m_window.get(), &MainWindow::autosaved);
    answer(QStringLiteral("One more?"), {});
    QTRY_VERIFY(!autosaved.isEmpty());
    QTRY_COMPARE(list->pathAt(0), QFileInfo(autosave).absoluteFilePath());

    const QString path = dir.filePath(QStringLiteral("listed.json"));
    const int messages = m_window->conversation()->messageCount();
    QSignalSpy saved(m_window.get(), &MainWindow::conversationSaved);
    m_window->saveConversation(path);
    QVERIFY(saved.wait(kEventTimeoutMs));
    QCOMPARE(list->pathAt(1), QFileInfo(path).absoluteFilePath());
    QVERIFY(ConversationList::recentFiles().contains(QFileInfo(path).absoluteFilePath()));

    newConversation();
    QCOMPARE(m_window->conversation()->messageCount(), 0);
    QSignalSpy loaded(m_window.get(), &MainWindow::conversationLoaded);
    QListWidgetItem* item = list->list()->item(1);
    QTest::mouseClick(list->list()->viewport(), Qt::LeftButton, {}, list->list()->visualItemRect(item).center());
    QVERIFY(loaded.wait(kTurnTimeoutMs));
    QCOMPARE(m_window->conversation()->messageCount(), messages);
    m_window->setAutosaveFile(QString());
  }

  // Last: it reloads the model (a new conversation), which the tests above do not expect.
  void retentionGatesCanBeChosenAndAWrongFileIsRefused() {
    const QString dir = m_window->model().dir;
    const std::string before = m_window->model().info.gates_file;
    const QString policy = QString::fromStdString(m_window->eviction().policy);
    // A file that is no gates file (the fixture's weights) is refused, naming it; the model loaded
    // before stays, with its gates.
    const QString wrong = QStringLiteral(TRIMKV_TEST_DATA_DIR "/vlm/idefics3/model.safetensors");
    QSignalSpy errors(m_window.get(), &MainWindow::errorReported);
    m_window->openModel(dir, wrong);
    QVERIFY(errors.wait(kLoadTimeoutMs));
    QVERIFY(errors.first().at(0).toString().contains(QStringLiteral("gates")));
    QVERIFY2(errors.first().at(1).toString().contains(QStringLiteral("idefics3/model.safetensors")),
             qPrintable(errors.first().at(1).toString()));
    for (QMessageBox* box : m_window->findChildren<QMessageBox*>()) box->accept();
    QCOMPARE(m_window->model().info.gates_file, before);
    // Gates made for another model (the demo model's are 192 wide, the Llama fixture's 64) are
    // refused too, naming the file.
    const QString llamaGates = QStringLiteral(TRIMKV_TEST_DATA_DIR "/gates/llama_gqa_dbtrimkv.safetensors");
    const QString demoGates = QDir::cleanPath(QStringLiteral(TRIMKV_TEST_DATA_DIR
                                                             "/../../resources/demo-model/retention_gates.safetensors"));
    const QString otherModel = before.empty() ? demoGates : llamaGates;
    errors.clear();
    m_window->openModel(dir, otherModel);
    QVERIFY(errors.wait(kLoadTimeoutMs));
    QVERIFY2(errors.first().at(1).toString().contains(QFileInfo(otherModel).fileName()),
             qPrintable(errors.first().at(1).toString()));
    for (QMessageBox* box : m_window->findChildren<QMessageBox*>()) box->accept();
    QCOMPARE(m_window->model().info.gates_file, before);
    // Gates that fit are taken (the folder's own file, chosen explicitly, or for the gate-less
    // fixture a DBTrimKV file made for its decoder's shape); "none" drops them.
    const QString fitting = before.empty() ? llamaGates : QString::fromStdString(before);
    QSignalSpy loaded(m_window.get(), &MainWindow::modelLoaded);
    m_window->openModel(dir, fitting);
    QVERIFY(loaded.wait(kLoadTimeoutMs));
    QCOMPARE(QString::fromStdString(m_window->model().info.gates_file), fitting);
    QCOMPARE(m_window->model().gates, fitting);
    m_window->openModel(dir, QStringLiteral("none"));
    QVERIFY(loaded.wait(kLoadTimeoutMs));
    QVERIFY(m_window->model().info.gates_file.empty());
    QVERIFY(m_window->findChild<QAction*>(QStringLiteral("chooseGatesAction")));
    // Back to the model and policy of the other tests.
    m_window->openModel(dir);
    QVERIFY(loaded.wait(kLoadTimeoutMs));
    QCOMPARE(m_window->model().info.gates_file, before);
    for (QMessageBox* box : m_window->findChildren<QMessageBox*>()) box->accept();
    QComboBox* combo = m_window->policyCombo();
    for (int i = 0; i < combo->count(); ++i)
      if (combo->itemData(i).toString() == policy) combo->setCurrentIndex(i);
    QTRY_COMPARE_WITH_TIMEOUT(QString::fromStdString(m_window->eviction().policy), policy, kEventTimeoutMs);
    const TurnStats stats = answer(QStringLiteral("Still there?"), {});
    QVERIFY(stats.generatedTokens > 0);
  }

  void aTextModelChatsWithoutTheImagePaneAndRefusesImages() {
    const QString vlm = m_window->model().dir;
    const QString text = QStringLiteral(TRIMKV_TEST_DATA_DIR "/models/qwen2");
    QSignalSpy loaded(m_window.get(), &MainWindow::modelLoaded);
    m_window->openModel(text);
    QVERIFY(loaded.wait(kLoadTimeoutMs));
    for (QMessageBox* box : m_window->findChildren<QMessageBox*>()) box->accept();  // policy notes
    QVERIFY(!m_window->model().vision.takes_images());
    QVERIFY(m_window->model().chatTemplate.endsWith(QStringLiteral("chat_template.jinja")));
    QVERIFY(!m_window->imageTabVisible());
    QVERIFY(!m_window->attachButton()->isEnabled());
    {  // an image dropped or pasted anyway is refused with a message; the typed text stays
      QSignalSpy errors(m_window.get(), &MainWindow::errorReported);
      m_window->input()->setPlainText(QStringLiteral("typed"));
      m_window->addAttachments({kImage});
      QCOMPARE(errors.count(), 1);
      QVERIFY(m_window->attachments().isEmpty());
      QCOMPARE(m_window->input()->toPlainText(), QStringLiteral("typed"));
      m_window->input()->clear();
      for (QMessageBox* box : m_window->findChildren<QMessageBox*>()) box->accept();
    }
    const TurnStats stats = answer(QStringLiteral("Hello, who are you?"), {});
    QVERIFY(stats.generatedTokens > 0);
    const InspectorFrame& f = m_window->lastFrame();
    QVERIFY(f.state.kv_text_entries > 0);
    QCOMPARE(f.state.kv_image_entries, int64_t{0});
    QCOMPARE(m_window->conversation()->messageCount(), 2);
    // Template variables start a new conversation with them; a malformed line is refused.
    m_window->setTemplateVariables({QStringLiteral("enable_thinking=false")});
    QTRY_COMPARE_WITH_TIMEOUT(m_window->lastFrame().state.tokens, int64_t{0}, kEventTimeoutMs);
    QSignalSpy errors(m_window.get(), &MainWindow::errorReported);
    m_window->setTemplateVariables({QStringLiteral("no equals sign")});
    QTRY_COMPARE_WITH_TIMEOUT(errors.count(), 1, kEventTimeoutMs);
    for (QMessageBox* box : m_window->findChildren<QMessageBox*>()) box->accept();
    m_window->setTemplateVariables({});
    // Back to the vision-language model: images again.
    m_window->openModel(vlm);
    QVERIFY(loaded.wait(kLoadTimeoutMs));
    for (QMessageBox* box : m_window->findChildren<QMessageBox*>()) box->accept();
    QVERIFY(m_window->imageTabVisible());
    QVERIFY(m_window->attachButton()->isEnabled());
  }

  void theWorkerComputesWithTheThreadSetting() {
    // Default: every core (or OMP_NUM_THREADS when set: tests/sanitize.sh tsan sets 1), on the
    // worker's own thread (OpenMP keeps the count per thread).
    int cores = std::max(1, QThread::idealThreadCount());
    if (const int asked = qEnvironmentVariableIntValue("OMP_NUM_THREADS"); asked > 0) cores = std::min(cores, asked);
    QCOMPARE(m_window->threads(), 0);
    QCOMPARE(m_window->threadsInUse(), cores);
    m_window->setThreads(1);
    QTRY_COMPARE_WITH_TIMEOUT(m_window->threadsInUse(), 1, kEventTimeoutMs);
    QVERIFY(answer(QStringLiteral("One thread now."), {}).generatedTokens > 0);
    m_window->setThreads(0);
    QTRY_COMPARE_WITH_TIMEOUT(m_window->threadsInUse(), cores, kEventTimeoutMs);
  }

  void theTimesShownAreWallTime() {
    QElapsedTimer wall;
    wall.start();
    const TurnStats stats = answer(QStringLiteral("How long does this take?"), {kImage});
    const double wallMs = static_cast<double>(wall.nsecsElapsed()) / 1e6;
    QVERIFY(stats.generatedTokens > 1);
    // The first token comes after the request and before the answer ends; the decode rate's
    // steps fit in the same wall time.
    QVERIFY(stats.timeToFirstTokenMs > 0);
    QVERIFY2(stats.timeToFirstTokenMs <= wallMs, qPrintable(QStringLiteral("%1 > %2").arg(stats.timeToFirstTokenMs).arg(wallMs)));
    QVERIFY(stats.tokensPerSecond > 0);
    const double decodeMs = 1000.0 * static_cast<double>(stats.generatedTokens - 1) / stats.tokensPerSecond;
    QVERIFY(stats.timeToFirstTokenMs + decodeMs <= wallMs * 1.01 + 1);
    // The status bar shows those numbers.
    const QString speed = QStringLiteral("first token %1 s").arg(stats.timeToFirstTokenMs / 1000.0, 0, 'f', 2);
    bool shown = false;
    for (QLabel* l : m_window->statusBar()->findChildren<QLabel*>()) shown = shown || l->text().contains(speed);
    QVERIFY(shown);
  }

  void theGridShowsFractionsAsAHeatmapAtScale() {
    // A Qwen2.5-VL-3B-shaped cache: 36 layers x 2 KV heads; head (l, h) keeps l + 1 of 40 text
    // positions and all 60 image ones.
    auto kv = std::make_shared<trimkv::KvSnapshot>();
    kv->n_tokens = 100;
    kv->geometry.n_layer = 36;
    kv->geometry.n_kv_head = 2;
    auto tokens = std::make_shared<std::vector<trimkv::vision::StreamToken>>(100);
    for (int t = 40; t < 100; ++t) (*tokens)[static_cast<size_t>(t)].info.modality = trimkv::Modality::Image;
    for (int l = 0; l < 36; ++l)
      for (int h = 0; h < 2; ++h) {
        trimkv::HeadSnapshot hs;
        hs.counts.text = l + 1;
        hs.counts.image = 60;
        kv->heads.push_back(hs);
      }
    HeadGrid grid;
    grid.resize(300, 420);  // 36 rows: cells too small for bars
    grid.setSnapshot(kv, tokens.get());
    QVERIFY(grid.showsHeatmap());
    QCOMPARE(grid.keptFraction(9, 1), 70.0 / 100.0);
    const trimkv::Modality text = trimkv::Modality::Text, image = trimkv::Modality::Image;
    QCOMPARE(grid.keptFraction(9, 1, &text), 10.0 / 40.0);
    QCOMPARE(grid.keptFraction(9, 1, &image), 1.0);
    const QString tip = grid.tooltipFor(9, 1);
    QVERIFY2(tip.contains(QStringLiteral("70.0% of the conversation's 100 positions")) &&
                 tip.contains(QStringLiteral("text: 25.0% of 40")) && tip.contains(QStringLiteral("image: 100.0% of 60")),
             qPrintable(tip));
    // The cell's colour is the ramp at its fraction (its top-left corner, above the split).
    const QImage shot = grid.grab().toImage();
    const int cellW = (300 - 34) / 2, cellH = (420 - 18) / 36;
    const QColor at = shot.pixelColor(34 + cellW + 2, 18 + 9 * cellH + 1);
    const QColor want = ModalityPalette::ramp(0.7);
    QVERIFY2(std::abs(at.red() - want.red()) <= 2 && std::abs(at.green() - want.green()) <= 2 &&
                 std::abs(at.blue() - want.blue()) <= 2,
             qPrintable(at.name() + QStringLiteral(" vs ") + want.name()));
    grid.setMode(HeadGrid::Mode::Bars);
    QVERIFY(!grid.showsHeatmap());
    grid.setMode(HeadGrid::Mode::Auto);
    grid.resize(600, 36 * 20);  // room for bars again
    QVERIFY(!grid.showsHeatmap());
  }

  void theStripZoomsAndScrolls() {
    auto kv = std::make_shared<trimkv::KvSnapshot>();
    kv->n_tokens = 4000;
    kv->geometry.n_layer = 1;
    kv->geometry.n_kv_head = 1;
    kv->heads.resize(1);
    auto tokens = std::make_shared<std::vector<trimkv::vision::StreamToken>>(4000);
    HeadStrip strip;
    strip.resize(400, 100);
    strip.setFrame(kv, tokens);
    QCOMPARE(strip.shownCellWidth(), 3);  // fit: the narrowest automatic width
    const int fitHeight = strip.heightForWidth(400);
    strip.zoomOut();
    QCOMPARE(strip.shownCellWidth(), 2);
    strip.setCellWidth(1);
    QCOMPARE(strip.shownCellWidth(), 1);
    QVERIFY(strip.heightForWidth(400) < fitHeight / 2);  // the whole conversation in a few rows
    QCOMPARE(strip.cellRect(400).topLeft(), QPoint(0, 17));  // 400 per row: the second row starts
    strip.zoomIn();
    strip.zoomIn();
    QCOMPARE(strip.shownCellWidth(), 3);
    strip.setCellWidth(99);
    QCOMPARE(strip.shownCellWidth(), 24);
    QVERIFY(strip.heightForWidth(400) > fitHeight);
    strip.setCellWidth(0);
    QCOMPARE(strip.shownCellWidth(), 3);
    // Ctrl+wheel zooms.
    QWheelEvent wheel(QPointF(10, 10), QPointF(10, 10), QPoint(), QPoint(0, 120), Qt::NoButton, Qt::ControlModifier,
                      Qt::NoScrollPhase, false);
    QCoreApplication::sendEvent(&strip, &wheel);
    QCOMPARE(strip.shownCellWidth(), 4);
  }

  void aQwenVlModelChatsWithImagesOfAnyShape() {
    // The Qwen2.5-VL fixture (window attention, M-RoPE) in a second window.
    MainWindow w;
    w.resize(1200, 800);
    w.show();
    QSignalSpy loaded(&w, &MainWindow::modelLoaded);
    w.openModel(QStringLiteral(TRIMKV_TEST_DATA_DIR "/vlm/qwen2_5_vl"));
    QVERIFY(loaded.wait(kLoadTimeoutMs));
    QCOMPARE(QString::fromStdString(w.model().vision.family), QStringLiteral("qwen2_vl"));
    trimkv::GenerationParams params;
    params.max_new_tokens = 8;
    params.stop_at_eos = false;
    w.setGenerationParams(params);
    QSignalSpy finished(&w, &MainWindow::answerFinished);
    w.sendTurn(QStringLiteral("What is tall here?"), {QStringLiteral(TRIMKV_TEST_DATA_DIR "/vlm/images/qwen_tall.png")});
    QVERIFY(finished.wait(kTurnTimeoutMs));
    QCOMPARE(finished.takeFirst().at(0).value<TurnStats>().generatedTokens, int64_t{8});
    // 70x130 px -> 56x140 -> a 5 x 2 grid of merged patches, drawn at its own aspect ratio.
    ImageOverlay* overlay = w.imageOverlay();
    QVERIFY(overlay->hasImage());
    QCOMPARE(overlay->gridRows(), 5);
    QCOMPARE(overlay->gridCols(), 2);
    QCOMPARE(overlay->patchCount(), 10);
    QVERIFY(overlay->keptPatchCount() <= 10);
    const trimkv::ImageRecord& r = w.lastFrame().state.images.at(0);
    QCOMPARE(r.resized_width, 56);
    QCOMPARE(r.resized_height, 140);
    QCOMPARE(r.tile_size, 0);
    saveShot(&w, QStringLiteral("qwen2_5_vl.png"));
  }
  void theModelPickerListsTheHuggingFaceCache() {
    // A cache laid out as huggingface_hub does, holding the Qwen2.5-VL fixture and a broken repo.
    QTemporaryDir cache;
    const QString repo = cache.filePath(QStringLiteral("models--test--qwen-tiny"));
    QVERIFY(QDir().mkpath(repo + QStringLiteral("/refs")) && QDir().mkpath(repo + QStringLiteral("/snapshots/c0ffee")));
    QFile ref(repo + QStringLiteral("/refs/main"));
    QVERIFY(ref.open(QIODevice::WriteOnly));
    ref.write("c0ffee");
    ref.close();
    const QDir fixture(QStringLiteral(TRIMKV_TEST_DATA_DIR "/vlm/qwen2_5_vl"));
    for (const QString& f : fixture.entryList(QDir::Files))
      QVERIFY(QFile::link(fixture.filePath(f), repo + QStringLiteral("/snapshots/c0ffee/") + f));
    QVERIFY(QDir().mkpath(cache.filePath(QStringLiteral("models--test--broken/refs"))));
    qputenv("HF_HUB_CACHE", cache.path().toUtf8());
    MainWindow w;
    w.show();
    ModelPicker* picker = w.pickModel();
    qunsetenv("HF_HUB_CACHE");
    QVERIFY(picker->isVisible());
    int qwen = -1, broken = -1, builtIn = -1;
    for (size_t i = 0; i < picker->choices().size(); ++i) {
      const ModelChoice& c = picker->choices()[i];
      if (c.name == QStringLiteral("test/qwen-tiny")) qwen = static_cast<int>(i);
      if (c.name == QStringLiteral("test/broken")) broken = static_cast<int>(i);
      if (c.source == ModelChoice::Source::BuiltIn) builtIn = static_cast<int>(i);
    }
    QVERIFY(qwen >= 0 && broken >= 0 && builtIn >= 0);
    const ModelChoice& q = picker->choices()[static_cast<size_t>(qwen)];
    QCOMPARE(q.family, QStringLiteral("qwen2_vl"));
    QVERIFY(q.problem.isEmpty());
    QVERIFY(q.bytes > QFileInfo(fixture.filePath(QStringLiteral("model.safetensors"))).size());  // links followed
    QVERIFY(!picker->choices()[static_cast<size_t>(broken)].problem.isEmpty());
    QVERIFY(!picker->choose(broken));  // listed, not openable
    QSignalSpy loaded(&w, &MainWindow::modelLoaded);
    QVERIFY(picker->choose(qwen));
    QVERIFY(loaded.wait(kLoadTimeoutMs));
    QCOMPARE(w.model().dir, repo + QStringLiteral("/snapshots/c0ffee"));
    QCOMPARE(QString::fromStdString(w.model().vision.family), QStringLiteral("qwen2_vl"));
  }
  void theDemoModelSaysWhatItKnowsAndAnswersAPictureWithoutALabel() {
    // The test window's fixture is not a demo-world model: no hint there.
    QVERIFY(!m_window->findChild<QLabel*>(QStringLiteral("demoHint"))->isVisible());
    // The built-in demo model, as a new user meets it.
    MainWindow w;
    w.resize(1200, 800);
    w.show();
    QSignalSpy loaded(&w, &MainWindow::modelLoaded);
    w.openModel(QStringLiteral(TRIMKV_DEMO_MODEL_DIR));  // not $TRIMKV_DEMO_MODEL's fixture
    QVERIFY(loaded.wait(kLoadTimeoutMs));
    auto* hint = w.findChild<QLabel*>(QStringLiteral("demoHint"));
    QVERIFY(hint->isVisible());
    QVERIFY(hint->text().contains(QStringLiteral("Try your own")));
    QVERIFY(hint->text().contains(QStringLiteral("not a general model")));
    auto ask = [&](const QString& text, const QStringList& images) {
      QSignalSpy finished(&w, &MainWindow::answerFinished);
      w.sendTurn(text, images);
      if (!finished.wait(kTurnTimeoutMs)) return QStringLiteral("(no answer)");
      return finished.takeFirst().at(0).value<TurnStats>().text;
    };
    // A picture drawn by the independent generator (Pillow, a JPEG), asked about as a user
    // types it: a bare attachment, no "Image 1:" label.
    const QString picture = QStringLiteral(TRIMKV_TEST_DATA_DIR "/independent-shapes/images/%1").arg(kIndependentPicture);
    QCOMPARE(ask(QStringLiteral("What color is the %1?").arg(kIndependentShape), {picture}).trimmed(),
             kIndependentColour);
    QVERIFY(!hint->text().contains(QStringLiteral("Outside")));
    // Words of its world in a question it was never asked ("objects" without a colour): outside.
    QVERIFY(ask(QStringLiteral("How many objects are there?"), {}) != QStringLiteral("(no answer)"));
    QVERIFY(hint->text().contains(QStringLiteral("Outside the demo model's world")));
    // Another wording of its grammar, typed loosely: inside again.
    QVERIFY(ask(QStringLiteral("looking at image 1 is there a green %1").arg(kIndependentShape), {}) !=
            QStringLiteral("(no answer)"));
    QVERIFY(!hint->text().contains(QStringLiteral("Outside")));
    // Outside its world: an answer (a guess), and the hint says so.
    const QString story = ask(QStringLiteral("Tell me a story about a dog."), {});
    QVERIFY(story != QStringLiteral("(no answer)"));
    QVERIFY(hint->text().contains(QStringLiteral("Outside the demo model's world")));
    QVERIFY(w.statusBar()->currentMessage().contains(QStringLiteral("Outside the demo model's world")));
    // A picture with nothing on it: no crash, an answer.
    QTemporaryDir dir;
    QImage blank(120, 120, QImage::Format_RGB32);
    blank.fill(QColor(90, 90, 90));
    QVERIFY(blank.save(dir.filePath(QStringLiteral("blank.png"))));
    QVERIFY(ask(QStringLiteral("How many circles are there?"), {dir.filePath(QStringLiteral("blank.png"))}) !=
            QStringLiteral("(no answer)"));
    QVERIFY(!hint->text().contains(QStringLiteral("Outside")));
  }
  void theStartBudgetAndTurnFromTheCommandLineAreUsed() {
    // --budget M: the loaded model's default policy starts at M, whatever its gates say;
    // --prompt / --image with --screenshot: that turn is sent instead of the sample's.
    MainWindow w;
    w.resize(1200, 800);
    w.show();
    w.setStartBudget(7);
    QString dir = qEnvironmentVariable("TRIMKV_DEMO_MODEL");
    if (dir.isEmpty()) dir = QString::fromStdString(trimkv::default_model_dir());
    QTemporaryDir out;
    ScreenshotRun run(&w, out.filePath(QStringLiteral("shot.png")));
    run.setTurn(QStringLiteral("Only this question."), {kImage});
    QSignalSpy applied(&w, &MainWindow::evictionApplied);
    QSignalSpy finished(&run, &ScreenshotRun::finished);
    run.start(dir);
    QVERIFY(finished.wait(kTurnTimeoutMs));
    QCOMPARE(finished.takeFirst().at(0).toInt(), 0);
    QVERIFY(!applied.isEmpty());
    const auto settings = applied.last().at(0).value<trimkv::EvictionSettings>();
    QVERIFY(settings.policy != "full");
    QCOMPARE(settings.budget_per_head.value_or(-1), int64_t{7});
    QCOMPARE(w.conversation()->messageCount(), 2);
    QCOMPARE(static_cast<int>(w.lastFrame().state.images.size()), 1);
    QVERIFY(QFileInfo(out.filePath(QStringLiteral("shot.png"))).size() > 0);
  }
  void aThinkingModelsReasoningIsFoldedApartFromItsAnswer() {
    ConversationView view;
    view.resize(500, 400);
    view.setAnswersOpenThinking(true);  // the template's generation prompt wrote <think>
    view.addUserMessage(QStringLiteral("How many circles?"), {});
    view.beginAnswer();
    view.appendToAnswer(QStringLiteral("I count them one by one"));
    // While it thinks, the reasoning shows under "Thinking…".
    QVERIFY(view.toPlainText().contains(QStringLiteral("Thinking…")));
    QVERIFY(view.toPlainText().contains(QStringLiteral("I count them one by one")));
    view.appendToAnswer(QStringLiteral(".\n</think>\n\nThere are **two**."));
    view.finishAnswer(QString());
    // Answered: the reasoning folds under its line; the answer stands alone (Markdown).
    const QString folded = view.toPlainText();
    QVERIFY2(folded.contains(QStringLiteral("▸ Thinking (6 words)")), qPrintable(folded));
    QVERIFY(!folded.contains(QStringLiteral("one by one")));
    QVERIFY(folded.contains(QStringLiteral("There are two.")));
    QVERIFY(!folded.contains(QStringLiteral("</think>")));
    QCOMPARE(view.lastAnswer(), QStringLiteral("I count them one by one.\n</think>\n\nThere are **two**."));
    // Its link unfolds it, and folds it again.
    view.toggleThinking(1);
    QVERIFY(view.toPlainText().contains(QStringLiteral("▾ Thinking (6 words)")));
    QVERIFY(view.toPlainText().contains(QStringLiteral("I count them one by one.")));
    view.toggleThinking(1);
    QVERIFY(!view.toPlainText().contains(QStringLiteral("one by one")));
    // A model without thinking: its text is the answer.
    view.setAnswersOpenThinking(false);
    QVERIFY(!view.toPlainText().contains(QStringLiteral("Thinking")));
  }

  void theWeightPrecisionMenuReloadsTheModelInThatFormat() {
    // A second window: File > Weight precision > q8 reloads the model with its matrices in q8
    // (the tooltip and the label say so), "the checkpoint's own" goes back to float32.
    MainWindow w;
    w.show();
    QSignalSpy loaded(&w, &MainWindow::modelLoaded);
    w.openModel(QStringLiteral(TRIMKV_TEST_DATA_DIR "/vlm/idefics3"));
    QVERIFY(loaded.wait(kLoadTimeoutMs));
    QCOMPARE(QString::fromStdString(w.model().info.weights_held), QStringLiteral("f32"));
    const int64_t f32Bytes = w.model().info.weights_held_bytes;
    auto* q8 = w.findChild<QAction*>(QStringLiteral("weights_q8"));
    QVERIFY(q8);
    q8->trigger();
    QVERIFY(loaded.wait(kLoadTimeoutMs));
    QCOMPARE(w.weights(), QStringLiteral("q8"));
    QCOMPARE(QString::fromStdString(w.model().info.weights_held), QStringLiteral("q8"));
    QVERIFY(w.model().info.weights_held_bytes < f32Bytes / 3);
    auto* label = w.findChild<QLabel*>(QStringLiteral("modelLabel"));
    QVERIFY(label);
    QVERIFY2(label->text().contains(QStringLiteral("q8")), qPrintable(label->text()));
    // It answers in q8.
    trimkv::GenerationParams params;
    params.max_new_tokens = 4;
    params.stop_at_eos = false;
    w.setGenerationParams(params);
    QSignalSpy finished(&w, &MainWindow::answerFinished);
    w.sendTurn(QStringLiteral("What is this?"), {QStringLiteral(TRIMKV_TEST_DATA_DIR "/vlm/images/a.png")});
    QVERIFY(finished.wait(kTurnTimeoutMs));
    QCOMPARE(finished.takeFirst().at(0).value<TurnStats>().generatedTokens, int64_t{4});
    w.findChild<QAction*>(QStringLiteral("weights_own"))->trigger();
    QVERIFY(loaded.wait(kLoadTimeoutMs));
    QCOMPARE(QString::fromStdString(w.model().info.weights_held), QStringLiteral("f32"));
    QVERIFY(w.findChild<QAction*>(QStringLiteral("weights_own"))->isChecked());
  }

  void aGgufFileOpensAndChatsThroughTheTemplateItCarries() {
    // File > Open a GGUF file… exists; a .gguf opened (as the dialog would) loads with its
    // matrices as stored (q8_0), its vocabulary and its chat template, answers, and is listed
    // among the recent models with its family.
    MainWindow w;
    w.restoreSettings();  // recent models recorded
    w.show();
    QVERIFY(w.findChild<QAction*>(QStringLiteral("openGgufAction")));
    const QString file = QStringLiteral(TRIMKV_TEST_DATA_DIR "/gguf/llama_gqa.q8_0-q8_0.gguf");
    QSignalSpy loaded(&w, &MainWindow::modelLoaded);
    w.openModel(file);
    QVERIFY(loaded.wait(kLoadTimeoutMs));
    for (QMessageBox* box : w.findChildren<QMessageBox*>()) box->accept();
    QCOMPARE(w.model().dir, file);
    QCOMPARE(QString::fromStdString(w.model().info.weights_held), QStringLiteral("q8"));
    QVERIFY2(w.model().chatTemplate.contains(QStringLiteral("tokenizer.chat_template")), qPrintable(w.model().chatTemplate));
    trimkv::GenerationParams params;
    params.max_new_tokens = 4;
    params.stop_at_eos = false;
    w.setGenerationParams(params);
    QSignalSpy finished(&w, &MainWindow::answerFinished);
    w.sendTurn(QStringLiteral("Hello"), {});
    QVERIFY(finished.wait(kTurnTimeoutMs));
    QCOMPARE(finished.takeFirst().at(0).value<TurnStats>().generatedTokens, int64_t{4});
    QString listed;
    for (const ModelChoice& c : listModelChoices())
      if (c.source == ModelChoice::Source::Recent && c.dir == file) listed = c.problem.isEmpty() ? c.family : c.problem;
    QCOMPARE(listed, QStringLiteral("llama"));
    // File > KV cache precision > f32 reloads it with a float32 cache (this q8_0 file's default:
    // f16, as llama.cpp keeps it); the MiB unit of the budget follows the bytes per entry.
    QCOMPARE(QString::fromStdString(w.model().info.kv_dtype), QStringLiteral("f16"));
    const int64_t f16Bytes = w.model().info.kv_bytes_per_token;
    auto* kv32 = w.findChild<QAction*>(QStringLiteral("kv_f32"));
    QVERIFY(kv32);
    kv32->trigger();
    QVERIFY(loaded.wait(kLoadTimeoutMs));
    for (QMessageBox* box : w.findChildren<QMessageBox*>()) box->accept();
    QCOMPARE(w.kvDtype(), QStringLiteral("f32"));
    QCOMPARE(QString::fromStdString(w.model().info.kv_dtype), QStringLiteral("f32"));
    QCOMPARE(w.model().info.kv_bytes_per_token, 2 * f16Bytes);
    auto* label = w.findChild<QLabel*>(QStringLiteral("modelLabel"));
    QVERIFY2(label->text().contains(QStringLiteral("KV f32")), qPrintable(label->text()));
    w.findChild<QAction*>(QStringLiteral("kv_own"))->trigger();
    QVERIFY(loaded.wait(kLoadTimeoutMs));
    QCOMPARE(QString::fromStdString(w.model().info.kv_dtype), QStringLiteral("f16"));
    // File > Device: auto (checked) runs here on the CPU; CUDA is offered only where it can run,
    // its tooltip saying why not; CPU reloads on the CPU.
    QCOMPARE(QString::fromStdString(w.model().info.device), QStringLiteral("cpu"));
    auto* deviceAuto = w.findChild<QAction*>(QStringLiteral("device_own"));
    auto* deviceCuda = w.findChild<QAction*>(QStringLiteral("device_cuda"));
    QVERIFY(deviceAuto && deviceCuda);
    QVERIFY(deviceAuto->isChecked());
    std::string why;
    const bool cuda = trimkv::cuda_usable(&why);
    QCOMPARE(deviceCuda->isEnabled(), cuda);
    if (!cuda) QVERIFY2(deviceCuda->toolTip().contains(QString::fromStdString(why)), qPrintable(deviceCuda->toolTip()));
    w.findChild<QAction*>(QStringLiteral("device_cpu"))->trigger();
    QVERIFY(loaded.wait(kLoadTimeoutMs));
    QCOMPARE(w.device(), QStringLiteral("cpu"));
    QCOMPARE(QString::fromStdString(w.model().info.device), QStringLiteral("cpu"));
  }

  void attachedImagesShowTheirTokensAndTheImageResolutionMenuChangesThem() {
    // Attached images show the image tokens they will take before anything is sent; File >
    // Image resolution reloads at another size (the counts follow); a size the checkpoint
    // cannot take is refused with a message and the model stays.
    MainWindow w;
    w.show();
    QSignalSpy loaded(&w, &MainWindow::modelLoaded);
    w.openModel(QStringLiteral(TRIMKV_TEST_DATA_DIR "/vlm/idefics3"));
    QVERIFY(loaded.wait(kLoadTimeoutMs));
    for (QMessageBox* box : w.findChildren<QMessageBox*>()) box->accept();
    const QString image = QStringLiteral(TRIMKV_TEST_DATA_DIR "/vlm/images/a.png");
    w.addAttachments({image});
    auto* label = w.findChild<QLabel*>(QStringLiteral("attachLabel"));
    QVERIFY(label);
    const QSize size = QImageReader(image).size();
    const int64_t own = w.model().imageTokens(size.width(), size.height());
    QVERIFY(own > 0);
    QVERIFY2(label->text().contains(QStringLiteral("(%1 tokens)").arg(own)), qPrintable(label->text()));
    // 384 px: more tiles per side than this tiny checkpoint has markers for -> refused.
    QSignalSpy errors(&w, &MainWindow::errorReported);
    w.findChild<QAction*>(QStringLiteral("image_384"))->trigger();
    QTRY_COMPARE_WITH_TIMEOUT(errors.count(), 1, kLoadTimeoutMs);
    QVERIFY2(errors.takeFirst().at(1).toString().contains(QStringLiteral("--image-size 384")), "names the size");
    for (QMessageBox* box : w.findChildren<QMessageBox*>()) box->accept();
    // 32 px: one tile per image.
    w.setImageSize(32);
    w.openModel(w.model().dir);
    QVERIFY(loaded.wait(kLoadTimeoutMs));
    const int64_t small = w.model().imageTokens(size.width(), size.height());
    QCOMPARE(small, int64_t{w.model().vision.image_seq_len});
    QVERIFY(small < own);
    QVERIFY2(label->text().contains(QStringLiteral("(%1 tokens)").arg(small)), qPrintable(label->text()));
    QCOMPARE(w.model().vision.longest_edge, 32);
  }

  void theMessageBeingWrittenSurvivesAKill() {
    // Typed text and an attached picture are kept a moment after the last change, with no close
    // (a window destroyed unclosed is what a kill or a crash leaves); a pasted picture's file,
    // which lives in a temporary folder, comes back as its copy.
    QTemporaryDir dir, pasted;
    const QString file = dir.filePath(QStringLiteral("draft.json"));
    const QString image = pasted.filePath(QStringLiteral("pasted-1.png"));
    QVERIFY(QFile::copy(kImage, image));
    {
      MainWindow w;
      w.setDraftFile(file);
      QTest::keyClicks(w.input(), QStringLiteral("How many stars are there?"));
      w.addAttachments({image});
      QTRY_VERIFY(QFileInfo::exists(file));
    }
    QVERIFY(pasted.remove());
    MainWindow again;
    again.setDraftFile(file);
    QVERIFY(again.restoreDraft());
    QCOMPARE(again.input()->toPlainText(), QStringLiteral("How many stars are there?"));
    QCOMPARE(again.attachments().size(), 1);
    QCOMPARE(QImage(again.attachments().first()), QImage(kImage));
    QVERIFY(!again.restoreDraft());  // the input is not empty: nothing is replaced
    // Emptied (as a send does) and closed: nothing is kept, the picture's copy goes too.
    again.input()->clear();
    again.clearAttachments();
    again.close();
    MainWindow third;
    third.setDraftFile(file);
    QVERIFY(!third.restoreDraft());
    QCOMPARE(QDir(dir.filePath(QStringLiteral("draft-images"))).entryList(QDir::Files).size(), 0);
    // No draft file set (the default, and --prompt / --send): nothing is written.
    MainWindow off;
    QTest::keyClicks(off.input(), QStringLiteral("x"));
    QTest::qWait(DraftKeeper::kDelayMs * 2);
    QCOMPARE(QDir(dir.path()).entryList(QDir::Files), QStringList{QStringLiteral("draft.json")});
  }

  void aTextModelGetsTheDraftsTextWithoutItsImages() {
    // A draft with a picture, put back under a model that takes none: the text comes back, the
    // picture is left out silently (no "takes no images" dialog at the start).
    QTemporaryDir dir;
    const QString file = dir.filePath(QStringLiteral("draft.json"));
    keepDraft(file, QStringLiteral("Hello"));
    MainWindow w;
    QSignalSpy loaded(&w, &MainWindow::modelLoaded);
    w.openModel(QStringLiteral(TRIMKV_TEST_DATA_DIR "/gguf/llama_gqa.q8_0-q8_0.gguf"));
    QVERIFY(loaded.wait(kLoadTimeoutMs));
    for (QMessageBox* box : w.findChildren<QMessageBox*>()) box->accept();  // the GGUF's notes
    QSignalSpy errors(&w, &MainWindow::errorReported);
    w.setDraftFile(file);
    QVERIFY(w.restoreDraft());
    QCOMPARE(w.input()->toPlainText(), QStringLiteral("Hello"));
    QVERIFY(w.attachments().isEmpty());
    QCOMPARE(errors.count(), 0);
  }

  void aQuitSignalReachesTheEventLoop() {
    // SIGINT and SIGTERM sent to the process arrive as a Qt signal on the object's thread (the
    // application closes its window on it); it installs no handler for them (QtTest's own, if
    // any, stays as it was).
    for (int signo : {SIGINT, SIGTERM}) {
      struct sigaction before {};
      ::sigaction(signo, nullptr, &before);
      QuitSignals quit;
      QSignalSpy got(&quit, &QuitSignals::received);
      QVERIFY(::kill(::getpid(), signo) == 0);
      QVERIFY(got.wait(kEventTimeoutMs));
      QCOMPARE(got.takeFirst().at(0).toInt(), signo);
      struct sigaction now {};
      ::sigaction(signo, nullptr, &now);
      QVERIFY(now.sa_handler == before.sa_handler);
    }
  }
};

// QTEST_MAIN's, with the Studio's signal watcher started first (as its main() does), so that
// SIGINT and SIGTERM reach QuitSignals in aQuitSignalReachesTheEventLoop.
int main(int argc, char** argv) {
  QuitSignals::startWatcher();
  QApplication app(argc, argv);
  app.setAttribute(Qt::AA_Use96Dpi, true);
  QTEST_SET_MAIN_SOURCE_PATH
  MainWindowTest test;
  return QTest::qExec(&test, argc, argv);
}
#include "test_main_window.moc"
