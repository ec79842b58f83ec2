#include "conversation_view.h"

#include <QRegularExpression>

#include "trimkv/core/thinking.h"

#include <QDesktopServices>
#include <algorithm>
#include <QFileInfo>
#include <QImageReader>
#include <QScrollBar>
#include <QTextBlockFormat>
#include <QTextCharFormat>
#include <QTextCursor>
#include <QTextDocument>
#include <QTextDocumentFragment>
#include <QTextImageFormat>
#include <QUrl>
#include <QUrlQuery>

namespace {
constexpr int kThumbSide = 96;
const QString kEditScheme = QStringLiteral("edit");
const QString kImageScheme = QStringLiteral("image");
const QString kThinkingScheme = QStringLiteral("thinking");

void insertMarkdown(QTextCursor& c, const QString& markdown) {
#if QT_VERSION >= QT_VERSION_CHECK(6, 4, 0)
  c.insertMarkdown(markdown);
#else  // QTextCursor::insertMarkdown is new in 6.4
  QTextDocument doc;
  doc.setMarkdown(markdown);
  c.insertFragment(QTextDocumentFragment(&doc));
#endif
}
}  // namespace

ConversationView::ConversationView(QWidget* parent) : QTextBrowser(parent) {
  // Every link comes to onAnchor: Edit and thumbnails are ours, the rest opens outside.
  setOpenLinks(false);
  connect(this, &QTextBrowser::anchorClicked, this, &ConversationView::onAnchor);
  setPlaceholderText(tr("Ask about an image: attach one (Attach image…, drag and drop or paste) and type a question."));
}

QUrl ConversationView::editLink(int userTurn) {
  QUrl url;
  url.setScheme(kEditScheme);
  url.setPath(QString::number(userTurn));
  return url;
}

QUrl ConversationView::thinkingLink(int index) {
  QUrl url;
  url.setScheme(kThinkingScheme);
  url.setPath(QString::number(index));
  return url;
}

void ConversationView::setAnswersOpenThinking(bool opens) {
  m_opensThinking = opens;
  render();
}

void ConversationView::toggleThinking(int index) {
  if (index < 0 || index >= m_entries.size()) return;
  m_entries[index].showThinking = !m_entries[index].showThinking;
  render();
}

QUrl ConversationView::imageLink(const QString& path) {
  QUrl url;
  url.setScheme(kImageScheme);
  QUrlQuery q;
  q.addQueryItem(QStringLiteral("path"), path);
  url.setQuery(q);
  return url;
}

void ConversationView::onAnchor(const QUrl& url) {
  if (url.scheme() == kEditScheme) {
    bool ok = false;
    const int turn = url.path().toInt(&ok);
    if (ok && m_editing) Q_EMIT editRequested(turn);
  } else if (url.scheme() == kThinkingScheme) {
    bool ok = false;
    const int index = url.path().toInt(&ok);
    if (ok) toggleThinking(index);
  } else if (url.scheme() == kImageScheme) {
    Q_EMIT imageClicked(QUrlQuery(url).queryItemValue(QStringLiteral("path"), QUrl::FullyDecoded));
  } else {
    QDesktopServices::openUrl(url);
  }
}

void ConversationView::addSystemMessage(const QString& text) {
  if (hasSystemMessage()) m_entries.front().text = text;
  else m_entries.push_front({Role::System, text, {}, false, {}});
  render();
}

void ConversationView::addUserMessage(const QString& text, const QStringList& images) {
  m_entries.push_back({Role::User, text, images, false, {}});
  render();
}

void ConversationView::beginAnswer() {
  m_entries.push_back({Role::Assistant, {}, {}, true, {}});
  render();
}

void ConversationView::appendToAnswer(const QString& text) {
  if (m_entries.isEmpty() || !m_entries.back().streaming) return;
  m_entries.back().text += text;
  render();
}

void ConversationView::finishAnswer(const QString& note) {
  if (m_entries.isEmpty() || m_entries.back().role != Role::Assistant) return;
  m_entries.back().streaming = false;
  m_entries.back().note = note;
  render();
}

void ConversationView::dropLastTurn() {
  while (!m_entries.isEmpty() && m_entries.back().role == Role::Assistant) m_entries.pop_back();
  if (!m_entries.isEmpty() && m_entries.back().role == Role::User) m_entries.pop_back();
  if (m_entries.size() == 1 && hasSystemMessage()) m_entries.clear();
  render();
}

void ConversationView::dropLastAnswer() {
  if (!m_entries.isEmpty() && m_entries.back().role == Role::Assistant) m_entries.pop_back();
  render();
}

void ConversationView::truncateBeforeUserTurn(int userTurn) {
  int seen = 0;
  for (int i = 0; i < m_entries.size(); ++i) {
    if (m_entries[i].role == Role::User && seen++ == userTurn) {
      m_entries.resize(i);
      break;
    }
  }
  render();
}

void ConversationView::setEditingEnabled(bool enabled) {
  if (m_editing == enabled) return;
  m_editing = enabled;
  render();
}

bool ConversationView::endsWithAnswer() const {
  return !m_entries.isEmpty() && m_entries.back().role == Role::Assistant;
}

int ConversationView::messageCount() const { return m_entries.size() - (hasSystemMessage() ? 1 : 0); }

int ConversationView::userMessageCount() const {
  return static_cast<int>(std::count_if(m_entries.begin(), m_entries.end(), [](const Entry& e) { return e.role == Role::User; }));
}

void ConversationView::clearConversation() {
  m_entries.clear();
  render();
}

void ConversationView::setEntries(const QVector<Entry>& entries) {
  m_entries = entries;
  render();
}

QString ConversationView::lastAnswer() const {
  for (auto it = m_entries.rbegin(); it != m_entries.rend(); ++it)
    if (it->role == Role::Assistant) return it->text;
  return {};
}

ConversationView::Entry ConversationView::userMessage(int userTurn) const {
  int seen = 0;
  for (const Entry& e : m_entries)
    if (e.role == Role::User && seen++ == userTurn) return e;
  return {};
}

// Re-renders the whole transcript (at most ~20 times a second while streaming; transcripts are
// short enough that this is cheaper than tracking edit positions and it keeps Markdown correct
// while an answer grows).
void ConversationView::render() {
  QScrollBar* bar = verticalScrollBar();
  const bool atBottom = bar->value() >= bar->maximum() - 4;
  const int oldValue = bar->value();

  QTextDocument* doc = document();
  doc->clear();
  QTextCursor c(doc);
  const QColor userColor = palette().color(QPalette::Link);
  const QColor quiet = palette().color(QPalette::PlaceholderText);
  const bool answering = !m_entries.isEmpty() && m_entries.back().streaming;
  int userTurn = 0;
  for (int i = 0; i < m_entries.size(); ++i) {
    const Entry& m = m_entries[i];
    QTextBlockFormat block;
    block.setTopMargin(i == 0 ? 0 : 12);
    if (i > 0) c.insertBlock(block);
    else c.setBlockFormat(block);
    QTextCharFormat head;
    head.setFontWeight(QFont::Bold);
    head.setForeground(m.role == Role::User ? userColor : m.role == Role::System ? quiet : palette().color(QPalette::Text));
    c.insertText(m.role == Role::User ? tr("You") : m.role == Role::System ? tr("System") : tr("Assistant"), head);
    if (m.role == Role::User) {
      if (m_editing && !answering) {
        QTextCharFormat link;
        link.setAnchor(true);
        link.setAnchorHref(editLink(userTurn).toString());
        link.setForeground(userColor);
        link.setFontUnderline(true);
        link.setToolTip(tr("Edit this message and send it again: the conversation after it is replaced"));
        c.insertText(QStringLiteral("   "), QTextCharFormat());
        c.insertText(tr("Edit"), link);
      }
      ++userTurn;
    }
    for (const QString& path : m.images) {
      c.insertBlock(QTextBlockFormat(), QTextCharFormat());
      QImageReader reader(path);
      QSize size = reader.size();
      if (!size.isValid()) size = QSize(kThumbSide, kThumbSide);
      size.scale(kThumbSide, kThumbSide, Qt::KeepAspectRatio);
      QTextImageFormat img;
      img.setName(QUrl::fromLocalFile(path).toString());
      img.setWidth(size.width());
      img.setHeight(size.height());
      img.setToolTip(tr("%1\nClick to see it at full size").arg(path));
      img.setAnchor(true);
      img.setAnchorHref(imageLink(path).toString());
      c.insertImage(img);
      c.insertText(QStringLiteral("  ") + QFileInfo(path).fileName(), QTextCharFormat());
    }
    c.insertBlock(QTextBlockFormat(), QTextCharFormat());
    QString body = m.text;
    if (m.role == Role::Assistant) {
      // A thinking model's reasoning: a "Thinking" line that folds it, then the answer.
      const trimkv::ThinkingSplit t = trimkv::split_thinking(m.text.toStdString(), m_opensThinking);
      if (t.has_thinking) {
        const bool open = m.showThinking || (m.streaming && !t.closed);
        const QString thinking = QString::fromStdString(t.thinking);
        QTextCharFormat link;
        link.setAnchor(true);
        link.setAnchorHref(thinkingLink(i).toString());
        link.setForeground(quiet);
        link.setToolTip(tr("The model's reasoning before its answer (its <think> block): click to %1")
                            .arg(open ? tr("fold it") : tr("show it")));
        const int words = static_cast<int>(thinking.split(QRegularExpression(QStringLiteral("\\s+")),
                                                           Qt::SkipEmptyParts).size());
        c.insertText((open ? QStringLiteral("▾ ") : QStringLiteral("▸ ")) +
                         (t.closed ? tr("Thinking (%1 words)").arg(words) : tr("Thinking…")),
                     link);
        if (open && !thinking.isEmpty()) {
          QTextCharFormat faint;
          faint.setFontItalic(true);
          faint.setForeground(quiet);
          c.insertBlock(QTextBlockFormat(), faint);
          c.insertText(thinking, faint);
        }
        c.insertBlock(QTextBlockFormat(), QTextCharFormat());
        body = QString::fromStdString(t.answer);
      }
    }
    if (m.streaming) body += QStringLiteral(" ▌");
    if (m.role == Role::Assistant) {
      insertMarkdown(c, body.isEmpty() ? QStringLiteral("…") : body);
    } else {
      // The user's (and the system's) words as typed, not Markdown; placeholders are shown as
      // the images above.
      QTextCharFormat plain;
      if (m.role == Role::System) {
        plain.setFontItalic(true);
        plain.setForeground(quiet);
      }
      c.insertText(QString(body).replace(QStringLiteral("<image>"), tr("[image] ")), plain);
    }
    if (!m.note.isEmpty()) {
      QTextCharFormat noteFormat;
      noteFormat.setFontItalic(true);
      noteFormat.setForeground(quiet);
      c.insertBlock(QTextBlockFormat(), noteFormat);
      c.insertText(QStringLiteral("(%1)").arg(m.note), noteFormat);
    }
  }
  bar->setValue(atBottom ? bar->maximum() : oldValue);
}
