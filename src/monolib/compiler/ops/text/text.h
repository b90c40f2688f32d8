/* String tensors: each element a fixed-width slot of NUL-padded UTF-8 (compiler/ops/text).
 * A slot of width w holds a string of ml_str_len(s, w) <= w bytes. */
#include <string.h>

/* bytes before the first NUL (or w) */
static inline int64_t ml_str_len(const uint8_t* s, int64_t w) {
  const uint8_t* z = (const uint8_t*)memchr(s, 0, (size_t)w);
  return z ? (int64_t)(z - s) : w;
}

/* a string of n bytes into a slot of width w (n <= w), NUL padded */
static inline void ml_str_put(uint8_t* out, int64_t w, const uint8_t* s, int64_t n) {
  if (n > 0) memcpy(out, s, (size_t)n);
  if (w > n) memset(out + n, 0, (size_t)(w - n));
}

/* byte-wise order of two strings (memcmp, then the shorter first): <0, 0, >0 */
static inline int ml_str_cmp(const uint8_t* a, int64_t la, const uint8_t* b, int64_t lb) {
  int c = memcmp(a, b, (size_t)(la < lb ? la : lb));
  if (c) return c;
  return la < lb ? -1 : (la > lb ? 1 : 0);
}

static inline uint8_t ml_ascii_lower(uint8_t c) { return (c >= 'A' && c <= 'Z') ? (uint8_t)(c + 32) : c; }
static inline uint8_t ml_ascii_upper(uint8_t c) { return (c >= 'a' && c <= 'z') ? (uint8_t)(c - 32) : c; }

static inline int ml_str_eq(const uint8_t* a, int64_t la, const uint8_t* b, int64_t lb) {
  return la == lb && memcmp(a, b, (size_t)la) == 0;
}

/* equal ignoring ASCII case */
static inline int ml_str_eq_nocase(const uint8_t* a, int64_t la, const uint8_t* b, int64_t lb) {
  if (la != lb) return 0;
  for (int64_t i = 0; i < la; ++i)
    if (ml_ascii_lower(a[i]) != ml_ascii_lower(b[i])) return 0;
  return 1;
}

/* the whitespace Python's bytes.split() splits on (no separator): space, \t \n \v \f \r */
static inline int ml_is_space(uint8_t c) { return c == ' ' || (c >= 9 && c <= 13); }

/* Python's s.split(sep, maxsplit) (sep_len 0: s.split(None, maxsplit), runs of
 * whitespace); maxsplit < 0: no limit. Returns the number of pieces; when out is not
 * NULL, piece k goes to the slot out + k * w (w >= n: a piece always fits). */
static int64_t ml_split(const uint8_t* s, int64_t n, const uint8_t* sep, int64_t sep_len,
                        int64_t maxsplit, uint8_t* out, int64_t w) {
  int64_t count = 0, left = maxsplit < 0 ? INT64_MAX : maxsplit, i = 0, j = 0;
#define ML_PIECE(a, b) do { if (out) ml_str_put(out + count * w, w, s + (a), (b) - (a)); ++count; } while (0)
  if (sep_len == 0) {
    while (left-- > 0) {
      while (i < n && ml_is_space(s[i])) ++i;
      if (i == n) break;
      j = i++;
      while (i < n && !ml_is_space(s[i])) ++i;
      ML_PIECE(j, i);
    }
    if (i < n) {  /* maxsplit reached: the rest, leading whitespace skipped */
      while (i < n && ml_is_space(s[i])) ++i;
      if (i != n) ML_PIECE(i, n);
    }
    return count;
  }
  while (j + sep_len <= n && left-- > 0) {
    for (; j + sep_len <= n; ++j) {
      if (memcmp(s + j, sep, (size_t)sep_len) == 0) {
        ML_PIECE(i, j);
        i = j = j + sep_len;
        break;
      }
    }
  }
  ML_PIECE(i, n);
#undef ML_PIECE
  return count;
}

/* ---- regular expressions: a Thompson NFA over code points (ops/text/regex.py) ----
 * Instructions: op, a, b. ML_RE_CHAR a: code point a; ML_RE_ANY: any code point but
 * '\n'; ML_RE_CLASS a..b: ranges [a, b) of the range table (pairs lo, hi), matched
 * when the code point is in one (ML_RE_NCLASS: in none); ML_RE_SPLIT a, b;
 * ML_RE_JMP a; ML_RE_ASSERT a: a zero-width condition; ML_RE_MATCH. */
enum { ML_RE_CHAR, ML_RE_ANY, ML_RE_CLASS, ML_RE_NCLASS, ML_RE_SPLIT, ML_RE_JMP,
       ML_RE_ASSERT, ML_RE_MATCH };
enum { ML_RE_AT_BEGIN, ML_RE_AT_END, ML_RE_AT_WORD, ML_RE_AT_NOT_WORD };

/* the code point at s[*i] (advancing *i); an invalid byte is U+FFFD, one byte long */
static inline int32_t ml_utf8_next(const uint8_t* s, int64_t n, int64_t* i) {
  uint8_t c = s[*i];
  int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (len == 0 || *i + len > n) { *i += 1; return 0xFFFD; }
  int32_t cp = len == 1 ? c : (int32_t)(c & (0x7F >> len));
  for (int k = 1; k < len; ++k) {
    if ((s[*i + k] & 0xC0) != 0x80) { *i += 1; return 0xFFFD; }
    cp = (cp << 6) | (s[*i + k] & 0x3F);
  }
  *i += len;
  return cp;
}

static inline int ml_re_word(int32_t c) {  /* RE2's \w: ASCII [0-9A-Za-z_] */
  return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}

/* add pc and its epsilon closure to list (marks: gen[pc] == step) */
static void ml_re_add(const int32_t* prog, int32_t pc, int32_t* list, int32_t* count,
                      int32_t* gen, int32_t step, int32_t* stack, int64_t pos, int64_t n,
                      int32_t prev, int32_t next) {
  int32_t top = 0;
  stack[top++] = pc;
  while (top) {
    int32_t p = stack[--top];
    if (gen[p] == step) continue;
    gen[p] = step;
    const int32_t* ins = prog + 3 * p;
    switch (ins[0]) {
      case ML_RE_JMP: stack[top++] = ins[1]; break;
      case ML_RE_SPLIT: stack[top++] = ins[2]; stack[top++] = ins[1]; break;
      case ML_RE_ASSERT: {
        int ok;
        if (ins[1] == ML_RE_AT_BEGIN) ok = pos == 0;
        else if (ins[1] == ML_RE_AT_END) ok = pos == n;
        else {
          int w = (prev >= 0 && ml_re_word(prev)) != (next >= 0 && ml_re_word(next));
          ok = ins[1] == ML_RE_AT_WORD ? w : !w;
        }
        if (ok) stack[top++] = p + 1;
        break;
      }
      default: list[(*count)++] = p;
    }
  }
}

/* whether the whole of s[0..n) matches; work: 6 * ninst int32 */
static uint8_t ml_re_fullmatch(const int32_t* prog, int32_t ninst, const int32_t* ranges,
                               const uint8_t* s, int64_t n, int32_t* work) {
  int32_t *cur = work, *nxt = work + ninst, *gen = work + 2 * ninst, *stack = work + 3 * ninst;
  int32_t ncur = 0, nnxt = 0, step = 1;
  for (int32_t k = 0; k < ninst; ++k) gen[k] = 0;
  int64_t i = 0, j = 0;
  int32_t prev = -1, c = n > 0 ? ml_utf8_next(s, n, &j) : -1;
  ml_re_add(prog, 0, cur, &ncur, gen, step, stack, 0, n, prev, c);
  for (;;) {
    if (i == n) {
      for (int32_t k = 0; k < ncur; ++k)
        if (prog[3 * cur[k]] == ML_RE_MATCH) return 1;
      return 0;
    }
    int64_t after = j;
    int32_t next = -1;
    if (after < n) { int64_t t = after; next = ml_utf8_next(s, n, &t); }
    ++step;
    nnxt = 0;
    for (int32_t k = 0; k < ncur; ++k) {
      const int32_t* ins = prog + 3 * cur[k];
      int hit = 0;
      switch (ins[0]) {
        case ML_RE_CHAR: hit = c == ins[1]; break;
        case ML_RE_ANY: hit = c != '\n'; break;
        case ML_RE_CLASS: case ML_RE_NCLASS: {
          int in = 0;
          for (int32_t r = ins[1]; r < ins[2]; ++r)
            if (c >= ranges[2 * r] && c <= ranges[2 * r + 1]) { in = 1; break; }
          hit = in == (ins[0] == ML_RE_CLASS);
          break;
        }
        default: break;
      }
      if (hit) ml_re_add(prog, cur[k] + 1, nxt, &nnxt, gen, step, stack, after, n, c, next);
    }
    if (!nnxt) return 0;
    int32_t* t = cur; cur = nxt; nxt = t; ncur = nnxt;
    i = after; j = after; prev = c; c = next;
    if (j < n) ml_utf8_next(s, n, &j);
  }
}
