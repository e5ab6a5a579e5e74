// Matches with less of RE2's machinery, with RE2's results (see dspark_match.h).
#include "dspark_match.h"

#include <algorithm>
#include <cstring>

#include "re2/prog.h"
#include "re2/re2.h"
#include "re2/regexp.h"
#include "simdjson.h"
#include "util/utf.h"

namespace dspark {
namespace {

using re2::Regexp;
using Runes = GroupBounds::Runes;
using Step = GroupBounds::Step;

constexpr uint32_t kMaxRune = 0x10FFFF;

// What an item (or a sequence of them) can start or end with (a superset is safe: it refuses more patterns),
// and whether it can match the empty text (then what comes after it can start the sequence). `known` is false
// for what is not looked into (`\C`, a match marker).
struct Edge {
  bool known = true;
  bool nullable = false;
  Runes runes;
};

// A literal's characters: itself, and with (?i) an ASCII letter's other case (what RE2's compiler matches:
// it folds ASCII only).
void add_literal(Runes& set, Regexp* re, uint32_t r) {
  set.add(r, r);
  if (re->parse_flags() & Regexp::FoldCase) {
    if (r >= 'a' && r <= 'z') set.add(r - 'a' + 'A', r - 'a' + 'A');
    if (r >= 'A' && r <= 'Z') set.add(r - 'A' + 'a', r - 'A' + 'a');
  }
}

Edge edge(Regexp* re, bool first);

// `^`, `$`, `\A`, `\z`, `\b`, `\B` and the empty pattern: they take no text.
bool empty_width(Regexp* re) {
  switch (re->op()) {
    case re2::kRegexpEmptyMatch:
    case re2::kRegexpBeginLine:
    case re2::kRegexpEndLine:
    case re2::kRegexpWordBoundary:
    case re2::kRegexpNoWordBoundary:
    case re2::kRegexpBeginText:
    case re2::kRegexpEndText:
      return true;
    default:
      return false;
  }
}

// The edge of items[from, to), read from the front (`first`) or from the back.
Edge sequence(Regexp* const* items, int from, int to, bool first) {
  Edge out;
  out.nullable = true;
  for (int k = 0; k < to - from && out.nullable; ++k) {
    Edge e = edge(items[first ? from + k : to - 1 - k], first);
    if (!e.known) return e;
    out.runes.add(e.runes);
    out.nullable = e.nullable;
  }
  return out;
}

Edge edge(Regexp* re, bool first) {
  Edge out;
  if (empty_width(re)) {
    out.nullable = true;
    return out;
  }
  switch (re->op()) {
    case re2::kRegexpNoMatch:  // matches nothing: no character, never empty
      return out;
    case re2::kRegexpLiteral:
      add_literal(out.runes, re, static_cast<uint32_t>(re->rune()));
      return out;
    case re2::kRegexpLiteralString:
      if (re->nrunes() == 0) {
        out.nullable = true;
        return out;
      }
      add_literal(out.runes, re, static_cast<uint32_t>(re->runes()[first ? 0 : re->nrunes() - 1]));
      return out;
    case re2::kRegexpCharClass:
      for (const re2::RuneRange& r : *re->cc()) out.runes.add(static_cast<uint32_t>(r.lo), static_cast<uint32_t>(r.hi));
      return out;
    case re2::kRegexpAnyChar:
      out.runes.add(0, kMaxRune);
      return out;
    case re2::kRegexpConcat:
      return sequence(re->sub(), 0, re->nsub(), first);
    case re2::kRegexpAlternate:
      for (int k = 0; k < re->nsub(); ++k) {
        Edge e = edge(re->sub()[k], first);
        if (!e.known) return e;
        out.runes.add(e.runes);
        out.nullable = out.nullable || e.nullable;
      }
      return out;
    case re2::kRegexpStar:
    case re2::kRegexpQuest: {
      Edge e = edge(re->sub()[0], first);
      e.nullable = true;
      return e;
    }
    case re2::kRegexpRepeat: {
      Edge e = edge(re->sub()[0], first);
      e.nullable = e.nullable || re->min() == 0;
      return e;
    }
    case re2::kRegexpPlus:
    case re2::kRegexpCapture:
      return edge(re->sub()[0], first);
    default:  // \C, a match marker
      out.known = false;
      return out;
  }
}

// The pattern's top-level items, with captures other than `group` looked through.
void flatten(Regexp* re, int group, std::vector<Regexp*>& items) {
  if (re->op() == re2::kRegexpConcat) {
    for (int k = 0; k < re->nsub(); ++k) flatten(re->sub()[k], group, items);
  } else if (re->op() == re2::kRegexpCapture && re->cap() != group) {
    flatten(re->sub()[0], group, items);
  } else {
    items.push_back(re);
  }
}

enum class Item { EMPTY, FIXED, RUN, OTHER };

// How the walk steps over an item: it takes no text (EMPTY), a fixed number of characters (FIXED), a run of
// one set's characters (RUN: the caller checks what is next to it), or the walk cannot place it (OTHER).
Item classify(Regexp* re, Step& step) {
  if (empty_width(re)) return Item::EMPTY;
  switch (re->op()) {
    case re2::kRegexpLiteral:
    case re2::kRegexpCharClass:
    case re2::kRegexpAnyChar:
      step.runes = 1;
      return Item::FIXED;
    case re2::kRegexpLiteralString:
      step.runes = re->nrunes();
      return Item::FIXED;
    case re2::kRegexpStar:
    case re2::kRegexpPlus:
    case re2::kRegexpQuest:
    case re2::kRegexpRepeat: {
      Regexp* sub = re->sub()[0];
      if (sub->op() != re2::kRegexpLiteral && sub->op() != re2::kRegexpCharClass && sub->op() != re2::kRegexpAnyChar)
        return Item::OTHER;
      step.min = re->op() == re2::kRegexpPlus ? 1 : re->op() == re2::kRegexpRepeat ? re->min() : 0;
      step.max = re->op() == re2::kRegexpQuest ? 1 : re->op() == re2::kRegexpRepeat ? re->max() : -1;
      if (step.min == step.max) {  // a{3}: a fixed number of characters, whatever is next to it
        step.runes = step.min;
        return Item::FIXED;
      }
      step.run = true;
      step.set = edge(sub, true).runes;
      return Item::RUN;
    }
    default:
      return Item::OTHER;
  }
}

// The UTF-8 character at [p, end): its length (0 when it is not UTF-8) and code point.
int decode(const unsigned char* p, const unsigned char* end, uint32_t& r) {
  unsigned char c = *p;
  if (c < 0x80) {
    r = c;
    return 1;
  }
  int len = (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
  if (!len || end - p < len) return 0;
  r = c & (0xFF >> (len + 1));
  for (int k = 1; k < len; ++k) {
    if ((p[k] & 0xC0) != 0x80) return 0;
    r = (r << 6) | (p[k] & 0x3F);
  }
  static const uint32_t kLeast[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (r < kLeast[len] || r > kMaxRune || (r >= 0xD800 && r <= 0xDFFF)) return 0;
  return len;
}

// The character that ends at `end` (not before `begin`): its length (0 when it is not UTF-8) and code point.
int decode_back(const unsigned char* begin, const unsigned char* end, uint32_t& r) {
  const unsigned char* p = end - 1;
  while (p > begin && end - p < 4 && (*p & 0xC0) == 0x80) --p;
  int len = decode(p, end, r);
  return len == end - p ? len : 0;
}

void put_utf8(std::string& out, re2::Rune r) {
  char bytes[re2::UTFmax];
  out.append(bytes, static_cast<size_t>(re2::runetochar(bytes, &r)));
}

// Appends `item`'s text (UTF-8) when it is a literal that matches only itself (no (?i)); else false.
bool put_literal(std::string& out, Regexp* item) {
  if (item->parse_flags() & Regexp::FoldCase) return false;
  if (item->op() == re2::kRegexpLiteral) {
    put_utf8(out, item->rune());
    return true;
  }
  if (item->op() != re2::kRegexpLiteralString) return false;
  for (int k = 0; k < item->nrunes(); ++k) put_utf8(out, item->runes()[k]);
  return true;
}

std::string_view view(const re2::StringPiece& p) { return std::string_view(p.data(), p.size()); }

// Where `literal` first occurs in [pos, end) of `text`, or npos.
size_t find(std::string_view text, size_t pos, size_t end, const std::string& literal) {
  if (end - pos < literal.size()) return std::string_view::npos;
  const void* at = memmem(text.data() + pos, end - pos, literal.data(), literal.size());
  return at ? static_cast<size_t>(static_cast<const char*>(at) - text.data()) : std::string_view::npos;
}

}  // namespace

LiteralStart::LiteralStart(const re2::RE2& re) {
  Regexp* top = re.Regexp();
  if (!top || (top->parse_flags() & (Regexp::Latin1 | Regexp::NeverNL))) return;
  std::vector<Regexp*> items;
  flatten(top, 0, items);  // every capture looked through
  for (Regexp* item : items)
    if (!put_literal(literal_, item)) break;
}

bool LiteralStart::search(const re2::RE2& re, std::string_view text, size_t pos, size_t end,
                          std::string_view& match, bool& missed) const {
  re2::StringPiece whole(text.data(), text.size()), piece;
  if (!literal_.empty() && !missed) {
    pos = find(text, pos, end, literal_);
    if (pos == std::string_view::npos) return false;  // every match starts with the literal
    if (re.Match(whole, pos, end, re2::RE2::ANCHOR_START, &piece, 1)) {
      match = view(piece);
      return true;
    }
    missed = true;
    ++pos;  // a match starts past it
  }
  if (!re.Match(whole, pos, end, re2::RE2::UNANCHORED, &piece, 1)) return false;
  match = view(piece);
  return true;
}

LazyEnd::LazyEnd(const re2::RE2& re) {
  Regexp* top = re.Regexp();
  if (!top || (top->parse_flags() & (Regexp::Latin1 | Regexp::NeverNL))) return;
  first_ = LiteralStart(re).literal();
  std::vector<Regexp*> items;
  flatten(top, 0, items);  // every capture looked through
  int n = static_cast<int>(items.size());
  if (first_.empty() || n < 3) return;
  Regexp* last = items[n - 1];
  Regexp* lazy = items[n - 2];
  if (!put_literal(last_, last) || last_.empty() || lazy->op() != re2::kRegexpStar ||
      !(lazy->parse_flags() & Regexp::NonGreedy) || lazy->sub()[0]->op() != re2::kRegexpAnyChar)
    return;
  std::vector<Regexp*> head(items.begin(), items.end() - 2);
  for (Regexp* item : head) item->Incref();  // Concat takes a reference to each
  Regexp* concat = Regexp::Concat(head.data(), static_cast<int>(head.size()), top->parse_flags());
  head_ = concat->CompileToProg(re.options().max_mem() * 2 / 3);  // RE2's own budget for its program
  concat->Decref();
  if (head_ && head_->anchor_end()) {  // (never after `.*?` and a literal: kept out all the same)
    delete head_;
    head_ = nullptr;
  }
}

LazyEnd::~LazyEnd() { delete head_; }

int LazyEnd::search(std::string_view text, size_t pos, size_t end, std::string_view& match, bool& missed) const {
  if (missed || !head_) return -1;
  size_t s = find(text, pos, end, first_);
  if (s == std::string_view::npos) return 0;  // every match starts with the first literal
  re2::StringPiece head;
  bool failed = false;
  if (!head_->SearchDFA(re2::StringPiece(text.data() + s, end - s), re2::StringPiece(text.data(), text.size()),
                        re2::Prog::kAnchored, re2::Prog::kFirstMatch, &head, &failed, nullptr) ||
      failed) {
    missed = true;
    return -1;
  }
  size_t x = s + head.size();
  size_t p = find(text, x, end, last_);
  if (p == std::string_view::npos || !simdjson::validate_utf8(text.data() + x, p - x)) {
    missed = true;
    return -1;
  }
  match = text.substr(s, p + last_.size() - s);
  return 1;
}

void Runes::add(uint32_t lo, uint32_t hi) { ranges.emplace_back(lo, hi); }

void Runes::add(const Runes& other) { ranges.insert(ranges.end(), other.ranges.begin(), other.ranges.end()); }

void Runes::seal() {
  std::sort(ranges.begin(), ranges.end());
  std::vector<std::pair<uint32_t, uint32_t>> merged;
  for (const auto& r : ranges) {
    if (!merged.empty() && r.first <= merged.back().second + 1)
      merged.back().second = std::max(merged.back().second, r.second);
    else
      merged.push_back(r);
  }
  ranges = std::move(merged);
  ascii[0] = ascii[1] = 0;
  for (const auto& r : ranges)
    for (uint32_t c = r.first; c <= r.second && c < 128; ++c) ascii[c >> 6] |= uint64_t{1} << (c & 63);
}

bool Runes::contains(uint32_t r) const {
  if (r < 128) return (ascii[r >> 6] >> (r & 63)) & 1;
  auto it = std::upper_bound(ranges.begin(), ranges.end(), std::make_pair(r, kMaxRune));
  return it != ranges.begin() && std::prev(it)->second >= r;
}

bool Runes::meets(const Runes& other) const {  // both sealed
  size_t i = 0, j = 0;
  while (i < ranges.size() && j < other.ranges.size()) {
    if (ranges[i].second < other.ranges[j].first)
      ++i;
    else if (other.ranges[j].second < ranges[i].first)
      ++j;
    else
      return true;
  }
  return false;
}

GroupBounds::GroupBounds(const re2::RE2& re, int group) {
  Regexp* top = re.Regexp();
  if (!top || group < 1 || (top->parse_flags() & (Regexp::Latin1 | Regexp::NeverNL))) return;
  std::vector<Regexp*> items;
  flatten(top, group, items);
  int n = static_cast<int>(items.size()), at = -1;
  for (int k = 0; k < n; ++k)
    if (items[k]->op() == re2::kRegexpCapture && items[k]->cap() == group) at = k;
  if (at < 0) return;
  // A run is placed when all that follows it (on the way back: all that precedes it) cannot start (end) with
  // one of its characters. Then it takes every character of its set up to the first other one (or its
  // maximum), not one fewer: what follows would start with one of its characters, so it would be empty, and
  // the match would end there, but the match goes on at least to that other character.
  auto placed = [&](Step& step, int k, bool forward) {
    step.set.seal();
    Edge next = forward ? sequence(items.data(), k + 1, n, true) : sequence(items.data(), 0, k, false);
    if (!next.known) return false;
    next.runes.seal();
    return !step.set.meets(next.runes);
  };
  for (int k = 0; k < at; ++k) {
    Step step;
    Item item = classify(items[k], step);
    if (item == Item::OTHER || (item == Item::RUN && !placed(step, k, true))) return;
    if (item != Item::EMPTY) before_.push_back(std::move(step));
  }
  for (int k = n - 1; k > at; --k) {
    Step step;
    Item item = classify(items[k], step);
    if (item == Item::OTHER || (item == Item::RUN && !placed(step, k, false))) return;
    if (item != Item::EMPTY) after_.push_back(std::move(step));
  }
  usable_ = true;
}

bool GroupBounds::find(std::string_view match, std::string_view& group) const {
  if (!usable_) return false;
  const auto* p = reinterpret_cast<const unsigned char*>(match.data());
  const unsigned char* q = p + match.size();
  uint32_t r;
  for (const Step& step : before_) {
    int count = 0;
    while (count < step.runes || (step.run && (step.max < 0 || count < step.max))) {
      int len = p < q ? decode(p, q, r) : 0;
      if (!step.run && !len) return false;  // a fixed character that is not there: not UTF-8
      if (step.run && (!len || !step.set.contains(r))) break;
      p += len;
      ++count;
    }
    if (step.run && count < step.min) return false;
  }
  for (const Step& step : after_) {
    int count = 0;
    while (count < step.runes || (step.run && (step.max < 0 || count < step.max))) {
      int len = q > p ? decode_back(p, q, r) : 0;
      if (!step.run && !len) return false;
      if (step.run && (!len || !step.set.contains(r))) break;
      q -= len;
      ++count;
    }
    if (step.run && count < step.min) return false;
  }
  group = std::string_view(reinterpret_cast<const char*>(p), static_cast<size_t>(q - p));
  return true;
}

}  // namespace dspark
