// TrimKV Studio widget tests (QTest, offscreen). The model is $TRIMKV_DEMO_MODEL (CTest sets the
// tiny random Idefics3 fixture: 2 layers x 2 KV heads, gibberish answers), else the embedded demo
// model. The tests check the plumbing between the worker and the widgets, counts and timing.
#include <QCheckBox>
#include <QSlider>
#include <QClipboard>
#include <QComboBox>
#include <QMimeData>
#include <QElapsedTimer>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTextBlock>
#include <QMessageBox>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QtTest>
#include <memory>
#include <set>
#include <tuple>

#include "budget_control.h"
#include "budget_units.h"
#include "chat_input.h"
#include "policy_options_form.h"
#include "conversation_view.h"
#include "generation_settings.h"
#include "head_grid.h"
#include "head_strip.h"
#include "image_overlay.h"
#include "main_window.h"
#include "screenshot_run.h"
#include "session_worker.h"
#include "system_prompt_panel.h"
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
    BudgetControl* control = m_window->budgetControl();
    control->setUnit(BudgetUnit::EntriesPerHead);
    // A spin box that already shows the value emits nothing: move it away first.
    if (control->entriesPerHead() == budget) setBudget(budget + 1);
    QSignalSpy applied(m_window.get(), &MainWindow::evictionApplied);
    control->spinBox()->setValue(budget);  // debounced, then sent to the worker
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
    QVERIFY(saved.wait(10000));
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
    QVERIFY(applied.wait(5000));
    QCOMPARE(*applied.takeLast().at(0).value<trimkv::EvictionSettings>().budget_per_head, int64_t{20});
    QCOMPARE(control->entriesPerHead(), int64_t{20});

    // Percent of the context: half the tokens so far.
    control->setUnit(BudgetUnit::PercentOfContext);
    control->spinBox()->setValue(50.0);
    QVERIFY(applied.wait(5000));
    const int64_t half = entriesFromUnit(50.0, BudgetUnit::PercentOfContext, scale);
    QCOMPARE(half, (scale.contextTokens + 1) / 2);
    QCOMPARE(*applied.takeLast().at(0).value<trimkv::EvictionSettings>().budget_per_head, half);

    // The slider moves the same budget (logarithmic), and the spin box follows it.
    control->slider()->setValue(control->slider()->value() / 2);
    QVERIFY(applied.wait(5000));
    const int64_t fromSlider = control->entriesPerHead();
    QCOMPARE(*applied.takeLast().at(0).value<trimkv::EvictionSettings>().budget_per_head, fromSlider);
    QCOMPARE(entriesFromUnit(control->spinBox()->value(), BudgetUnit::PercentOfContext, scale), fromSlider);
    control->setUnit(BudgetUnit::EntriesPerHead);
    QCOMPARE(static_cast<int64_t>(control->spinBox()->value()), fromSlider);
  }

  void policyOptionsShowOnlyWhatThePolicyAccepts() {
    QComboBox* policy = m_window->policyCombo();
    const QString before = policy->currentData().toString();
    auto choose = [&](const QString& name) {
      QSignalSpy applied(m_window.get(), &MainWindow::evictionApplied);
      policy->setCurrentIndex(policy->findData(name));
      Q_EMIT policy->activated(policy->currentIndex());  // as a choice in the list does
      QVERIFY(applied.wait(5000));
      QCOMPARE(applied.last().at(0).value<trimkv::EvictionSettings>().policy, name.toStdString());
    };
    PolicyOptionsForm* form = m_window->policyOptions();
    setBudget(64);  // snapkv needs more than its window (32) per head
    choose(QStringLiteral("snapkv"));
    QCOMPARE(form->optionNames(), (QStringList{"window", "kernel", "pooling"}));
    QSignalSpy applied(m_window.get(), &MainWindow::evictionApplied);
    auto* window = qobject_cast<QSpinBox*>(form->editor(QStringLiteral("window")));
    QVERIFY(window);
    window->setValue(4);
    QVERIFY(applied.wait(5000));
    const auto s = applied.takeLast().at(0).value<trimkv::EvictionSettings>();
    QCOMPARE(s.policy, std::string("snapkv"));
    QCOMPARE(s.options, std::vector<std::string>{"window=4"});
    // A value the engine refuses is named in the error and the settings in force stay.
    QSignalSpy errors(m_window.get(), &MainWindow::errorReported);
    auto* kernel = qobject_cast<QSpinBox*>(form->editor(QStringLiteral("kernel")));
    kernel->setValue(4);  // must be odd
    QVERIFY(errors.wait(5000));
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
