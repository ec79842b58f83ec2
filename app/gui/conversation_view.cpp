#include "conversation_view.h"

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

namespace {
constexpr int kThumbSide = 96;

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
  setOpenExternalLinks(true);
  setPlaceholderText(tr("Ask about an image: attach one (Attach image…, drag and drop or paste) and type a question."));
}

void ConversationView::addUserMessage(const QString& text, const QStringList& images) {
  m_messages.push_back({true, text, images, false, {}});
  render();
}

void ConversationView::beginAnswer() {
  m_messages.push_back({false, {}, {}, true, {}});
  render();
}

void ConversationView::appendToAnswer(const QString& text) {
  if (m_messages.isEmpty() || !m_messages.back().streaming) return;
  m_messages.back().text += text;
  render();
}

void ConversationView::finishAnswer(const QString& note) {
  if (m_messages.isEmpty() || m_messages.back().user) return;
  m_messages.back().streaming = false;
  m_messages.back().note = note;
  render();
}

void ConversationView::dropLastTurn() {
  while (!m_messages.isEmpty() && !m_messages.back().user) m_messages.pop_back();
  if (!m_messages.isEmpty()) m_messages.pop_back();
  render();
}

void ConversationView::dropLastAnswer() {
  if (!m_messages.isEmpty() && !m_messages.back().user) m_messages.pop_back();
  render();
}

bool ConversationView::endsWithAnswer() const { return !m_messages.isEmpty() && !m_messages.back().user; }

void ConversationView::clearConversation() {
  m_messages.clear();
  render();
}

QString ConversationView::lastAnswer() const {
  for (auto it = m_messages.rbegin(); it != m_messages.rend(); ++it)
    if (!it->user) return it->text;
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
  for (int i = 0; i < m_messages.size(); ++i) {
    const Message& m = m_messages[i];
    QTextBlockFormat block;
    block.setTopMargin(i == 0 ? 0 : 12);
    if (i > 0) c.insertBlock(block);
    else c.setBlockFormat(block);
    QTextCharFormat head;
    head.setFontWeight(QFont::Bold);
    head.setForeground(m.user ? userColor : palette().color(QPalette::Text));
    c.insertText(m.user ? tr("You") : tr("Assistant"), head);
    for (const QString& path : m.images) {
      c.insertBlock(QTextBlockFormat());
      QImageReader reader(path);
      QSize size = reader.size();
      if (!size.isValid()) size = QSize(kThumbSide, kThumbSide);
      size.scale(kThumbSide, kThumbSide, Qt::KeepAspectRatio);
      QTextImageFormat img;
      img.setName(QUrl::fromLocalFile(path).toString());
      img.setWidth(size.width());
      img.setHeight(size.height());
      img.setToolTip(path);
      c.insertImage(img);
      c.insertText(QStringLiteral("  ") + QFileInfo(path).fileName(), QTextCharFormat());
    }
    c.insertBlock(QTextBlockFormat(), QTextCharFormat());
    QString body = m.text;
    if (m.streaming) body += QStringLiteral(" ▌");
    // The user's words as typed, not Markdown; placeholders are shown as the images above.
    if (m.user) c.insertText(QString(body).replace(QStringLiteral("<image>"), tr("[image] ")));
    else insertMarkdown(c, body.isEmpty() ? QStringLiteral("…") : body);
    if (!m.note.isEmpty()) {
      QTextCharFormat noteFormat;
      noteFormat.setFontItalic(true);
      noteFormat.setForeground(palette().color(QPalette::PlaceholderText));
      c.insertBlock(QTextBlockFormat(), noteFormat);
      c.insertText(QStringLiteral("(%1)").arg(m.note), noteFormat);
    }
  }
  bar->setValue(atBottom ? bar->maximum() : oldValue);
}
