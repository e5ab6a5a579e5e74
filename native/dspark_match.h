// Matches found with less of RE2's machinery than RE2::Match uses, with RE2's results. Internal to the core
// (dspark_extract.cpp); nothing here throws but std::bad_alloc.
//
// Why: a free-text content's cost is mostly its x-extract patterns (docs/benchmarks.md). For a value group,
// RE2 finds the match with a forward DFA, its start with a reverse DFA over the whole match, then runs a
// backtracker (BitState) over the match to place the group: for coder's '```[^\n]*\n(.*?)```' two passes and
// a backtrack over each code block. Here:
//   - LiteralStart: a pattern that starts with a literal starts its leftmost match where that literal first
//     occurs and an anchored match follows (memmem, then one forward DFA: no reverse DFA);
//   - LazyEnd: a pattern that ends with `.*?` and a literal ends its match where that literal next occurs
//     (memmem: no DFA over what `.*?` takes, a code block);
//   - GroupBounds: the group is placed by walking the match from its start over what stands before the
//     group, and from its end back over what stands after it (no backtracker).
//
// GroupBounds, when: the group is an item of the pattern's top-level sequence (captures around other items are
// looked through), and every item before and after it is one the walk can place exactly:
//   - a literal (one character of text per character of the pattern, folded or not), a class, `.`;
//   - an empty-width assertion (`^`, `$`, `\A`, `\z`, `\b`, `\B`): it takes no text;
//   - a repetition (`*`, `+`, `?`, `{n,m}`, greedy or not) of one literal, class or `.`, when all that follows
//     it in the pattern (on the way back: all that precedes it) cannot start (end) with a character the
//     repetition takes: then the repetition takes exactly the run of its characters, at most m of them.
// Under these rules the match splits around the group in exactly one way, so every engine (the backtracker
// included) places it there: the result is RE2's, by construction. A pattern outside them, or a text where
// a step finds what it should not (text that is not UTF-8), is left to RE2's backtracker.
#ifndef DSPARK_MATCH_H
#define DSPARK_MATCH_H

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace re2 {
class Prog;
class RE2;
}

namespace dspark {

// A pattern's leftmost match in [pos, end) of `text`: RE2::Match's UNANCHORED search, `text` its context.
// Where the pattern starts with a literal, the search starts at the literal's first occurrence, anchored
// there. When no match starts there, RE2 searches on from past it, and `missed` is set: the caller's later
// searches of the same text (each_match, a count) pass it back and go to RE2 at once, so that a text with
// many occurrences but few matches is not scanned again from each (the time stays linear in the text).
class LiteralStart {
 public:
  explicit LiteralStart(const re2::RE2& re);
  bool search(const re2::RE2& re, std::string_view text, size_t pos, size_t end, std::string_view& match,
              bool& missed) const;
  const std::string& literal() const { return literal_; }  // "" when the pattern does not start with one

 private:
  std::string literal_;  // UTF-8
};

// A pattern that ends with a lazy `.*?` (with (?s): any character) and then a literal, and starts with a
// literal (coder's '```[^\n]*\n(.*?)```', vl's '<\|ref\|>(.*?)<\|/ref\|>'): its leftmost match is what comes
// before `.*?` (the head), matched anchored where the first literal first occurs, extended to the first
// occurrence of the last literal after it (memmem), the text between being UTF-8. That is the match under
// RE2's (Perl's) order: the head's first choice, then the fewest characters for `.*?`. Where any of this is
// not so (no head there, no literal after it, not UTF-8), the search is left to RE2 (and `missed` set).
class LazyEnd {
 public:
  explicit LazyEnd(const re2::RE2& re);
  ~LazyEnd();
  LazyEnd(const LazyEnd&) = delete;
  LazyEnd& operator=(const LazyEnd&) = delete;
  bool usable() const { return head_ != nullptr; }

  // As LiteralStart::search: 1 with the match, 0 when there is none; -1: ask RE2.
  int search(std::string_view text, size_t pos, size_t end, std::string_view& match, bool& missed) const;

 private:
  re2::Prog* head_ = nullptr;
  std::string first_, last_;  // the literals it starts and ends with (UTF-8)
};

class GroupBounds {
 public:
  // Analyzes `re`'s parsed pattern for capturing group `group` (1 or more).
  GroupBounds(const re2::RE2& re, int group);

  // Whether the pattern is one the walk places the group in (else `find` is always false).
  bool usable() const { return usable_; }

  // For `match`, a match of the pattern (a view into the text RE2 searched), the group's text; false when
  // the walk cannot place it for this text: ask RE2's backtracker.
  bool find(std::string_view match, std::string_view& group) const;

  // A set of characters (code points), as sorted, disjoint, inclusive ranges.
  struct Runes {
    std::vector<std::pair<uint32_t, uint32_t>> ranges;
    uint64_t ascii[2] = {0, 0};  // the same set below 128, as bits, for the common case
    void add(uint32_t lo, uint32_t hi);
    void add(const Runes& other);
    void seal();  // sorts and merges the ranges, fills `ascii`
    bool contains(uint32_t r) const;
    bool meets(const Runes& other) const;
  };

  // One item of the walk: `runes` characters of any kind, or a run of at most `max` (-1: no limit), at least
  // `min`, characters of `set`.
  struct Step {
    bool run = false;
    int runes = 0;
    int min = 0, max = 0;
    Runes set;
  };

 private:
  bool usable_ = false;
  std::vector<Step> before_;  // the items before the group, first to last
  std::vector<Step> after_;   // the items after the group, last to first
};

}  // namespace dspark

#endif
