// TrimKV Studio widget tests (QTest, offscreen). The model is $TRIMKV_DEMO_MODEL (CTest sets the
// tiny random Idefics3 fixture: 2 layers x 2 KV heads, gibberish answers), else the embedded demo
// model. The tests check the plumbing between the worker and the widgets, counts and timing.
#include <QCheckBox>
#include <QClipboard>
#include <QComboBox>
#include <QMimeData>
#include <QElapsedTimer>
#include <QMessageBox>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QtTest>
#include <memory>
#include <set>
#include <tuple>

#include "chat_input.h"
#include "conversation_view.h"
#include "generation_settings.h"
#include "head_grid.h"
#include "head_strip.h"
#include "image_overlay.h"
#include "main_window.h"
#include "screenshot_run.h"
#include "session_worker.h"
#include "timeline_chart.h"
#include "trimkv/core/default_model.h"

namespace {
constexpr int kLoadTimeoutMs = 120'000;
constexpr int kTurnTimeoutMs = 120'000;
const QString kImage = QStringLiteral(TRIMKV_TEST_DATA_DIR "/vlm/images/a.png");
const QString kNotAnImage = QStringLiteral(TRIMKV_TEST_DATA_DIR "/vlm/images/not_an_image.png");
}  // namespace

class MainWindowTest : public QObject {
  Q_OBJECT

 private:
  std::unique_ptr<MainWindow> m_window;

  // Sends a turn and waits for its answer; returns the stats.
  TurnStats answer(const QString& text, const QStringList& images) {
    QSignalSpy finished(m_window.get(), &MainWindow::answerFinished);
    m_window->sendTurn(text, images);
    if (!finished.wait(kTurnTimeoutMs)) {
      qWarning("no answer arrived");
      return {};
    }
    return finished.takeFirst().at(0).value<TurnStats>();
  }

  void setBudget(int budget) {
    // A spin box that already shows the value emits nothing: move it away first.
    if (m_window->budgetSpin()->value() == budget) setBudget(budget + 1);
    QSignalSpy applied(m_window.get(), &MainWindow::evictionApplied);
    m_window->budgetSpin()->setValue(budget);  // debounced, then sent to the worker
    QVERIFY(applied.wait(5000));
    const auto s = applied.takeLast().at(0).value<trimkv::EvictionSettings>();
    QVERIFY(s.budget_per_head.has_value());
    QCOMPARE(*s.budget_per_head, int64_t{budget});
  }

  void newConversation() {
    QSignalSpy frames(m_window.get(), &MainWindow::frameShown);
    m_window->newConversation();
    QVERIFY(frames.wait(10000));
    QCOMPARE(m_window->lastFrame().state.tokens, int64_t{0});
  }

 private Q_SLOTS:
  void initTestCase() {
    QString dir = qEnvironmentVariable("TRIMKV_DEMO_MODEL");
    if (dir.isEmpty()) dir = QString::fromStdString(trimkv::default_model_dir());
    m_window = std::make_unique<MainWindow>();
    m_window->resize(1200, 800);
    m_window->show();
    QSignalSpy loaded(m_window.get(), &MainWindow::modelLoaded);
    QSignalSpy applied(m_window.get(), &MainWindow::evictionApplied);
    m_window->openModel(dir);
    QVERIFY(loaded.wait(kLoadTimeoutMs));
    // The model's default policy follows the load.
    QTRY_VERIFY_WITH_TIMEOUT(!applied.isEmpty() &&
                                 applied.last().at(0).value<trimkv::EvictionSettings>().policy != "full",
                             10000);
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
    QVERIFY(errors.wait(10000));
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
    QVERIFY(saved.wait(10000));
    QVERIFY(QFileInfo::exists(dir.filePath(QStringLiteral("chat-images/1-a.png"))));
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
    QVERIFY(errors.wait(10000));
    QVERIFY(errors.first().at(1).toString().contains(QStringLiteral("bad.json")));
    QVERIFY(errors.first().at(1).toString().contains(QStringLiteral("role")));
    QCOMPARE(m_window->conversation()->messageCount(), messages);
    for (QMessageBox* box : m_window->findChildren<QMessageBox*>()) box->accept();
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

  void stopEndsGenerationWithin200ms() {
    newConversation();
    m_window->activateWindow();
    QVERIFY(QTest::qWaitForWindowActive(m_window.get()));
    m_window->input()->setFocus();
    trimkv::GenerationParams params;
    params.max_new_tokens = 900;
    params.stop_at_eos = false;
    m_window->setGenerationParams(params);
    QSignalSpy finished(m_window.get(), &MainWindow::answerFinished);
    m_window->sendTurn(QStringLiteral("Tell me a long story."), {});
    QTRY_VERIFY_WITH_TIMEOUT(m_window->lastFrame().phase == QStringLiteral("decode"), kTurnTimeoutMs);
    QVERIFY(finished.isEmpty());
    QElapsedTimer clock;
    clock.start();
    QTest::keyClick(m_window->input(), Qt::Key_Escape);  // the Stop shortcut
    QVERIFY(finished.wait(5000));
    const qint64 ms = clock.elapsed();
    qInfo("stop took %lld ms", static_cast<long long>(ms));
    const TurnStats stats = finished.takeFirst().at(0).value<TurnStats>();
    QCOMPARE(stats.stopReason, QStringLiteral("cancelled"));
    QVERIFY2(ms < 200, qPrintable(QStringLiteral("stop took %1 ms").arg(ms)));
    QVERIFY(m_window->sendButton()->isEnabled());
    QVERIFY(!m_window->stopButton()->isEnabled());
  }
};

QTEST_MAIN(MainWindowTest)
#include "test_main_window.moc"
