// tests/oracle/extract.py for one text (see dspark_extract.h). Each piece follows the code the reference
// runs: pyarrow's kernels (extract_regex, match_substring_regex, count_substring_regex) for the first match,
// its presence and the count; google-re2's finditer for all and last matches; extract.py's text_scalar for
// the conversions; strict.py's loads and exact.py's json_text (dspark_exact.h's, as bodies are read) for
// `json` values.
#include "dspark_extract.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "dspark_match.h"
#include "dspark_json.h"
#include "re2/re2.h"
#include "re2/regexp.h"

namespace dspark {
namespace {

using re2::RE2;
using re2::StringPiece;

const char* kind_name(ContentKind kind) {
  switch (kind) {
    case ContentKind::STRING: return "string";
    case ContentKind::INTEGER: return "integer";
    case ContentKind::NUMBER: return "number";
    case ContentKind::BOOLEAN: return "boolean";
    case ContentKind::ARRAY: return "array";
    case ContentKind::JSON: return "json";
  }
  return "?";
}

std::string_view view(const StringPiece& p) { return p.data() ? std::string_view(p.data(), p.size()) : ""; }

// google-re2's OneCharLen: the length of the UTF-8 sequence a lead byte starts.
size_t one_char_len(unsigned char lead) { return "\1\1\1\1\1\1\1\1\1\1\1\1\2\2\3\4"[lead >> 4]; }

// -- matching -----------------------------------------------------------------------------------------------

// The value's group: 1, or the whole match when the pattern has none.
int value_group(const RE2& re) { return re.NumberOfCapturingGroups() > 0 ? 1 : 0; }

// A text's first match, once it is known.
struct FirstMatch {
  bool known = false, found = false;
  std::string_view match;
};

// The leftmost match in [pos, end) of `text` (its context), without its groups: LiteralStart's search, or
// `first` (when given: the text's first match, for the patterns that match as this one does) when it is
// known and the search is of all of the text.
bool find_match(const TextExtractor::Pattern& pattern, std::string_view text, size_t pos, size_t end,
                std::string_view& match, bool& missed, FirstMatch* first) {
  bool whole = first && pos == 0 && end == text.size();
  if (whole && first->known) {
    match = first->match;
    return first->found;
  }
  int lazy = pattern.lazy->search(text, pos, end, match, missed);
  bool hit = lazy >= 0 ? lazy == 1 : pattern.start->search(*pattern.re, text, pos, end, match, missed);
  if (whole) *first = FirstMatch{true, hit, match};
  return hit;
}

// One search of [pos, end) of `text` (its context): the match, and the value group's text. A group that took
// no part gives "" (pyarrow appends its empty piece; extract.py maps None to ""). Where dspark_match.h's
// shortcuts apply, RE2 finds the match with a forward DFA only and the group is placed without its
// backtracker (`missed` and `first`: find_match's).
bool search(const TextExtractor::Pattern& pattern, std::string_view text, size_t pos, size_t end,
            std::string_view& match, std::string_view& value, bool& missed, FirstMatch* first) {
  const RE2& re = *pattern.re;
  int group = value_group(re);
  bool found = false;
  if (group == 0 || pattern.bounds->usable()) {
    if (!find_match(pattern, text, pos, end, match, missed, first)) return false;
    found = group == 0 ? (value = match, true) : pattern.bounds->find(match, value);
  }
  StringPiece pieces[2];
  if (found) {
#ifdef DSPARK_CHECK_GROUPS  // the fuzz and test builds: every shortcut's result against RE2's own
    if (!re.Match(StringPiece(text.data(), text.size()), pos, end, RE2::UNANCHORED, pieces, group + 1) ||
        view(pieces[0]).data() != match.data() || pieces[0].size() != match.size() ||
        view(pieces[group]).data() != value.data() || pieces[group].size() != value.size()) {
      std::fprintf(stderr, "dspark_match: a match or group where RE2 has another (pattern %s)\n", re.pattern().c_str());
      std::abort();
    }
#endif
    return true;
  }
  if (!re.Match(StringPiece(text.data(), text.size()), pos, end, RE2::UNANCHORED, pieces, group + 1)) return false;
  match = view(pieces[0]);
  value = view(pieces[group]);
  return true;
}

// pyarrow's extract_regex (RE2::PartialMatchN) and google-re2's search: the leftmost match.
bool first_match(const TextExtractor::Pattern& pattern, std::string_view text, std::string_view& out,
                 FirstMatch* first) {
  std::string_view match;
  bool missed = false;
  return search(pattern, text, 0, text.size(), match, out, missed, first);
}

// google-re2's finditer over a str: each search starts where the last match ended, over the whole text (so
// `^` and `\b` see what is before); after an empty match at the start position it moves on by a character.
template <typename Visit>
void each_match(const TextExtractor::Pattern& pattern, std::string_view text, FirstMatch* first, Visit visit) {
  std::string_view match, value;
  bool missed = false;
  size_t pos = 0, end = text.size();
  while (search(pattern, text, pos, end, match, value, missed, first)) {
    visit(value);
    size_t match_end = static_cast<size_t>(match.data() - text.data()) + match.size();
    if (pos == end) break;
    if (pos == match_end) {
      pos += one_char_len(static_cast<unsigned char>(text[pos]));
      if (pos > end) pos = end;  // only for text that is not UTF-8
    } else {
      pos = match_end;
    }
  }
}

// pyarrow's count_substring_regex, step for step: FindAndConsume on the rest of the text (which is then the
// whole text to RE2: `^` matches where the rest starts), and past an empty match one byte on.
int64_t count_matches(const TextExtractor::Pattern& pattern, std::string_view text, FirstMatch* first) {
  int64_t count = 0;
  bool missed = false;
  std::string_view match;
  for (size_t start = 0;;) {
    std::string_view rest = text.substr(start);
    if (!find_match(pattern, rest, 0, rest.size(), match, missed, start == 0 ? first : nullptr)) break;
    ++count;
    size_t consumed = static_cast<size_t>(match.data() - rest.data()) + match.size();
    if (consumed == 0) {
      if (rest.empty()) break;
      consumed = 1;
    }
    start += consumed;
  }
#ifdef DSPARK_CHECK_GROUPS
  StringPiece input(text.data(), text.size());
  int64_t expected = 0;
  size_t last_size = input.size();
  while (RE2::FindAndConsume(&input, *pattern.re)) {
    ++expected;
    if (last_size == input.size()) {
      if (input.size() > 0)
        input.remove_prefix(1);
      else
        break;
    }
    last_size = input.size();
  }
  if (count != expected) {
    std::fprintf(stderr, "dspark_match: a count RE2 does not give (pattern %s)\n", pattern.re->pattern().c_str());
    std::abort();
  }
#endif
  return count;
}

// -- text_scalar -------------------------------------------------------------------------------------------------

bool digit(char c) { return c >= '0' && c <= '9'; }

std::string_view strip(std::string_view s) {  // str.strip(" \t\n\r")
  auto ws = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!s.empty() && ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && ws(s.back())) s.remove_suffix(1);
  return s;
}

bool is_integer(std::string_view s) {  // _INTEGER.fullmatch: [-+]?[0-9]+
  size_t i = !s.empty() && (s[0] == '-' || s[0] == '+');
  if (i == s.size()) return false;
  for (; i < s.size(); ++i)
    if (!digit(s[i])) return false;
  return true;
}

bool is_number(std::string_view s) {  // _NUMBER.fullmatch: [-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?
  size_t i = 0, n = s.size();
  if (i < n && (s[i] == '-' || s[i] == '+')) ++i;
  if (i < n && digit(s[i])) {
    while (i < n && digit(s[i])) ++i;
    if (i < n && s[i] == '.') ++i;
    while (i < n && digit(s[i])) ++i;
  } else if (i < n && s[i] == '.') {
    ++i;
    if (i == n || !digit(s[i])) return false;
    while (i < n && digit(s[i])) ++i;
  } else {
    return false;
  }
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < n && (s[i] == '-' || s[i] == '+')) ++i;
    if (i == n || !digit(s[i])) return false;
    while (i < n && digit(s[i])) ++i;
  }
  return i == n;
}

bool ascii_iequals(std::string_view s, std::string_view lower) {
  if (s.size() != lower.size()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != lower[i]) return false;
  }
  return true;  // no character outside ASCII lowercases into "true" or "false"
}

std::string wrong_type(ContentKind kind, std::string_view text) {
  return std::string("wrong type: expected ") + kind_name(kind) + ", got " +
         dspark_exact::py_repr(first_code_points(text, 40));
}

bool text_scalar(std::string_view text, ContentKind kind, ExtractedValue& out, std::string& reason) {
  if (kind == ContentKind::STRING) {
    out.tag = ExtractedValue::STR;
    out.str = text;
    return true;
  }
  std::string_view stripped = strip(text);
  if (kind == ContentKind::INTEGER && is_integer(stripped)) {
    // len(stripped) <= 20 and within int64: 20 characters are at most 20 digits, below 2^67.
    if (stripped.size() <= 20) {
      bool negative = stripped[0] == '-';
      size_t i = stripped[0] == '-' || stripped[0] == '+';
      unsigned __int128 magnitude = 0;
      for (; i < stripped.size(); ++i) magnitude = magnitude * 10 + static_cast<unsigned>(stripped[i] - '0');
      unsigned __int128 limit = static_cast<unsigned __int128>(INT64_MAX) + (negative ? 1 : 0);
      if (magnitude <= limit) {
        out.tag = ExtractedValue::INT;
        out.i = negative ? static_cast<int64_t>(0 - static_cast<uint64_t>(magnitude)) : static_cast<int64_t>(magnitude);
        return true;
      }
    }
    reason = "out of range for a 64-bit integer";
    return false;
  }
  if (kind == ContentKind::NUMBER && is_number(stripped)) {
    double d = dspark_exact::c_strtod(std::string(stripped));  // overflow gives an infinity
    if (!std::isinf(d)) {
      out.tag = ExtractedValue::DBL;
      out.d = d;
      return true;
    }
  }
  if (kind == ContentKind::BOOLEAN && (ascii_iequals(stripped, "true") || ascii_iequals(stripped, "false"))) {
    out.tag = ExtractedValue::BOOL;
    out.b = ascii_iequals(stripped, "true");
    return true;
  }
  reason = wrong_type(kind, text);
  return false;
}

// extract.py's _embedded: a match's JSON value, appended as json_text writes it.
bool embedded(std::string_view match, std::string& out, std::string& reason) {
  dspark_exact::Rejection why;  // strict.py's reason is not shown: extract.py's message quotes the match
  if (dspark_exact::compact_json(match, out, why)) return true;
  reason = "not JSON: " + dspark_exact::py_repr(first_code_points(match, 40));
  return false;
}

// extract.py's _converter applied to what the pattern took: one match, or (`all`) every match.
bool convert(const ContentPropertySpec& p, const std::vector<std::string_view>& matches, ExtractedValue& out,
             std::string& reason) {
  if (p.kind == ContentKind::JSON) {
    out.tag = ExtractedValue::STR;
    out.json.clear();
    if (p.mode != ExtractMode::ALL) {
      if (!embedded(matches[0], out.json, reason)) return false;
    } else {
      out.json.push_back('[');
      for (size_t k = 0; k < matches.size(); ++k) {
        if (k) out.json.push_back(',');
        if (!embedded(matches[k], out.json, reason)) return false;
      }
      out.json.push_back(']');
    }
    out.str = out.json;
    return true;
  }
  if (p.kind == ContentKind::ARRAY) {
    out.tag = ExtractedValue::LIST;
    out.items.resize(matches.size());
    for (size_t k = 0; k < matches.size(); ++k)
      if (!text_scalar(matches[k], p.item_kind, out.items[k], reason)) return false;
    return true;
  }
  return text_scalar(matches[0], p.kind, out, reason);
}

}  // namespace

std::string_view first_code_points(std::string_view s, size_t n) {
  size_t i = 0;
  for (; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) {
      if (n == 0) break;
      --n;
    }
  }
  return s.substr(0, i);
}

TextExtractor::TextExtractor(std::vector<ContentPropertySpec> properties) : properties_(std::move(properties)) {
  RE2::Options options;  // what pyarrow (MakeRE2Options) and google-re2 (Options()) give: UTF-8, the defaults
  options.set_log_errors(false);
  std::vector<std::string> keys(properties_.size());  // per property: its pattern without groups, as text
  for (int k = 0; k < static_cast<int>(properties_.size()); ++k) {
    const ContentPropertySpec& p = properties_[k];
    patterns_.emplace_back();
    if (!error_.empty() || !p.has_extract) continue;
    const char* refusal = nullptr;
    if (p.mode == ExtractMode::COUNT && p.kind != ContentKind::INTEGER)
      refusal = "count needs kind integer";
    else if (p.mode == ExtractMode::ALL && p.kind != ContentKind::ARRAY && p.kind != ContentKind::JSON)
      refusal = "all needs kind array or json";
    else if (p.mode != ExtractMode::ALL && p.kind == ContentKind::ARRAY)
      refusal = "an array needs mode all";
    else if (p.kind == ContentKind::ARRAY &&
             (p.item_kind == ContentKind::ARRAY || p.item_kind == ContentKind::JSON))
      refusal = "an array's items are string, integer, number or boolean";
    if (refusal) {
      error_ = "property '" + p.name + "': " + refusal;
      continue;
    }
    auto re = std::make_unique<RE2>(p.pattern, options);
    if (!re->ok()) {
      error_ = "property '" + p.name + "': not an RE2 pattern (" + re->error() + ")";
      continue;
    }
    // Patterns that are the same but for their groups (coder's code and code_blocks) have the same matches:
    // a text's first one is found once for them.
    RE2::Options bare = options;
    bare.set_never_capture(true);
    RE2 without_groups(p.pattern, bare);
    if (without_groups.ok()) keys[k] = without_groups.Regexp()->ToString();
    const std::string_view cut = " [truncated]";  // ToString stops on a huge pattern: not a key then
    if (keys[k].size() >= cut.size() && std::string_view(keys[k]).substr(keys[k].size() - cut.size()) == cut)
      keys[k].clear();
    patterns_.back().first_of =
        keys[k].empty() ? k : static_cast<int>(std::find(keys.begin(), keys.begin() + k, keys[k]) - keys.begin());
    patterns_.back().start = std::make_unique<LiteralStart>(*re);
    patterns_.back().lazy = std::make_unique<LazyEnd>(*re);
    patterns_.back().bounds = std::make_unique<GroupBounds>(*re, 1);
    patterns_.back().re = std::move(re);
  }
}

TextExtractor::~TextExtractor() = default;

bool TextExtractor::extract(std::string_view text, std::vector<ExtractedValue>& values,
                            std::string& content_error) const {
  values.resize(properties_.size());
  for (ExtractedValue& v : values) v.tag = ExtractedValue::NONE;  // the rest is set with the tag
  static thread_local std::vector<FirstMatch> firsts;  // per property: its text's first match, once known
  firsts.assign(properties_.size(), FirstMatch{});
  content_error.clear();
  if (!text.data()) text = std::string_view("", 0);  // match offsets are taken from text.data()
  bool failed = false;
  std::vector<std::string_view> matches;
  std::string reason;
  for (size_t k = 0; k < properties_.size(); ++k) {
    const ContentPropertySpec& p = properties_[k];
    const Pattern& pattern = patterns_[k];
    const RE2* re = pattern.re.get();
    if (!re) continue;
    ExtractedValue& out = values[k];
    FirstMatch* first = &firsts[static_cast<size_t>(pattern.first_of)];
    matches.clear();
    switch (p.mode) {
      case ExtractMode::COUNT:
        out.tag = ExtractedValue::INT;
        out.i = count_matches(pattern, text, first);
        continue;
      case ExtractMode::FIRST: {
        if (p.kind == ContentKind::BOOLEAN) {  // match_substring_regex: whether it matches
          out.tag = ExtractedValue::BOOL;
          out.b = RE2::PartialMatch(StringPiece(text.data(), text.size()), *re);
          continue;
        }
        std::string_view found;
        if (!first_match(pattern, text, found, first)) continue;
        matches.push_back(found);
        break;
      }
      case ExtractMode::LAST: {
        bool any = false;
        std::string_view last;
        each_match(pattern, text, first, [&](std::string_view m) {
          last = m;
          any = true;
        });
        if (!any) continue;
        matches.push_back(last);
        break;
      }
      case ExtractMode::ALL:
        each_match(pattern, text, first, [&](std::string_view m) { matches.push_back(m); });
        break;
    }
    if (!convert(p, matches, out, reason)) {
      out = ExtractedValue();
      if (!failed) content_error = "property '" + p.name + "': " + reason;
      failed = true;
    }
  }
  return failed;
}

}  // namespace dspark
