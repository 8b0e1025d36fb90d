/* The C scanner of a turn's text: what extract.py's patterns find, in one pass over its characters.

   ``pipeline/core/extract.py`` stays the source of truth: :func:`pipeline.core.extract.scan_text`
   is this scanner written with the ``re`` / ``regex`` patterns it replaces, and it is what runs
   where this module is not built (no C compiler, ``VOLUNTEER_PURE_CORE=1``, a failed build). On a
   first sight of a text, those patterns' scans, each a Python call building match objects, were a
   third of extracting it; here one pass classifies every character once (the Unicode classes come
   from ``_cscan_tables.h``, generated from the pinned ``regex`` module by
   ``scripts/gen_scan_tables.py``) and four short loops over those classes find

   - the @handles      (``re``    ``@([A-Za-z0-9_]{2,})``, findall),
   - the capitalised runs and whether each starts a sentence (``regex`` ``_CAP_RUN_RE``, finditer,
     and ``is_at_sentence_start``),
   - the weak tokens   (``weak_tokens``: ``_WEAK_TOKEN_RE`` without its look-behind),
   - the CJK runs of 2 characters or more (``re`` ``_CJK_RUN_RE``).

   ``tests/unit/core/test_cscan.py`` compares the tables with ``regex`` on every code point and this
   scanner's output with ``scan_text`` on random Unicode text. No I/O, no state: a pure function. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_cscan_tables.h"

/* Flags beyond the table's Unicode classes (SC_LU .. SC_WS take the low 5 bits). */
#define F_DIGIT 0x0020    /* 0-9 */
#define F_APOS 0x0040     /* ' or U+2019 */
#define F_HYPHEN 0x0080   /* - */
#define F_AT 0x0100       /* @ */
#define F_DOT 0x0200      /* . */
#define F_HANDLE 0x0400   /* [A-Za-z0-9_] */
#define F_CJK 0x0800      /* U+4E00-9FFF, U+3040-30FF, U+AC00-D7AF */
#define F_SENT_END 0x1000 /* one of . ! ? : ; \n \r U+2022 - ( [ " U+201C */
#define F_HIRA 0x2000     /* U+3040-309F: hiragana */
#define F_CJK_PLAIN 0x4000 /* a CJK character whose n-grams are their own norm: see cjk_plain() */

#define CAP_CHAR (SC_L | F_DIGIT | F_APOS | F_HYPHEN)          /* [\p{L}0-9'’\-] */
#define WEAK_RUN (SC_L | SC_N | F_APOS | F_HYPHEN | F_AT)      /* [\p{L}\p{N}'’@-] */
#define WEAK_CHAR (SC_L | SC_N | F_APOS | F_HYPHEN)            /* [\p{L}\p{N}'’-] */
#define CAP_TOKENS_MAX 4 /* a token, then {0,3} more */

static uint16_t ascii_flags[128];

static void init_ascii_flags(void) {
    for (Py_UCS4 c = 0; c < 128; c++) {
        uint16_t f = sc_stage2[((Py_ssize_t)sc_stage1[c >> SC_BLOCK_SHIFT] << SC_BLOCK_SHIFT) | (c & SC_BLOCK_MASK)];
        if (c >= '0' && c <= '9') f |= F_DIGIT | F_HANDLE;
        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_') f |= F_HANDLE;
        if (c == '\'') f |= F_APOS;
        if (c == '-') f |= F_HYPHEN | F_SENT_END;
        if (c == '@') f |= F_AT;
        if (c == '.') f |= F_DOT | F_SENT_END;
        if (c == '!' || c == '?' || c == ':' || c == ';' || c == '\n' || c == '\r' || c == '(' || c == '['
            || c == '"') f |= F_SENT_END;
        ascii_flags[c] = f;
    }
}

/* A character of the CJK ranges that is printable, caseless, in NFKC in any context (quick check
   Yes: no decomposition, combining class 0, never composed with a character before it): a text of
   such characters is its own ``normalize_alias`` (``normalize.is_plain``). Not so: the unassigned
   U+3040, U+3097-3098, U+D7A4-D7AF (not printable), the combining voiced marks U+3099-309A, and
   U+309B-309C, U+309F, U+30FF (compatibility decompositions). ``tests/unit/core/test_cscan.py``
   checks every character this accepts against ``unicodedata``. */
static inline int cjk_plain(Py_UCS4 c) {
    if (c >= 0x4E00 && c <= 0x9FFF) return 1;
    if (c >= 0xAC00 && c <= 0xD7A3) return 1;
    if (c >= 0x3041 && c <= 0x3096) return 1;
    if (c >= 0x309D && c <= 0x309E) return 1;
    if (c >= 0x30A0 && c <= 0x30FE) return 1;
    return 0;
}

static inline uint16_t classify(Py_UCS4 c) {
    if (c < 128) return ascii_flags[c];
    uint16_t f = sc_stage2[((Py_ssize_t)sc_stage1[c >> SC_BLOCK_SHIFT] << SC_BLOCK_SHIFT) | (c & SC_BLOCK_MASK)];
    if (c == 0x2019) f |= F_APOS;
    else if (c == 0x2022 || c == 0x201C) f |= F_SENT_END;
    else if ((c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3040 && c <= 0x30FF) || (c >= 0xAC00 && c <= 0xD7AF)) {
        f |= F_CJK;
        if (c <= 0x309F && c >= 0x3040) f |= F_HIRA;
        if (cjk_plain(c)) f |= F_CJK_PLAIN;
    }
    return f;
}

/* End of the capitalised token starting at i (an \p{Lu}):
   \p{Lu}[\p{L}0-9'’\-]*(?:\.\p{L}[\p{L}0-9'’\-]*)* — each part greedy, none gives anything back. */
static Py_ssize_t cap_token_end(const uint16_t *f, Py_ssize_t n, Py_ssize_t i) {
    i++;
    for (;;) {
        while (i < n && (f[i] & CAP_CHAR)) i++;
        if (i + 1 < n && (f[i] & F_DOT) && (f[i + 1] & SC_L)) {
            i += 2;
            continue;
        }
        return i;
    }
}

/* ``is_at_sentence_start``: whitespace skipped backwards, then the previous character decides. */
static int at_sentence_start(const uint16_t *f, Py_ssize_t idx) {
    Py_ssize_t i = idx - 1;
    while (i >= 0 && (f[i] & SC_WS)) i--;
    return i < 0 || (f[i] & F_SENT_END);
}

static int append_slice(PyObject *list, PyObject *text, Py_ssize_t start, Py_ssize_t end) {
    PyObject *piece = PyUnicode_Substring(text, start, end);
    if (piece == NULL) return -1;
    int rc = PyList_Append(list, piece);
    Py_DECREF(piece);
    return rc;
}

/* The next @handle from *pos on: 1 and its bounds (without the @), *pos after it; 0 when none. */
static int next_handle(const uint16_t *f, Py_ssize_t n, Py_ssize_t *pos, Py_ssize_t *start, Py_ssize_t *end) {
    Py_ssize_t i = *pos;
    while (i < n) {
        if (!(f[i] & F_AT)) {
            i++;
            continue;
        }
        Py_ssize_t j = i + 1;
        while (j < n && (f[j] & F_HANDLE)) j++;
        if (j - (i + 1) >= 2) {
            *start = i + 1;
            *end = *pos = j;
            return 1;
        }
        i++;
    }
    *pos = n;
    return 0;
}

/* A tuple this module builds of strs, bools, ints, None and such tuples only: it can be in no
   reference cycle, so it leaves the garbage collector's lists at once (CPython untracks such a
   tuple itself, but only when a collection visits it: ~7 % of the op's first pass was collections
   walking the new candidates). Returns t. */
static PyObject *atomic(PyObject *t) {
    if (t != NULL && PyObject_GC_IsTracked(t)) PyObject_GC_UnTrack(t);
    return t;
}

static int find_handles(PyObject *text, const uint16_t *f, Py_ssize_t n, PyObject *out) {
    Py_ssize_t pos = 0, start, end;
    while (next_handle(f, n, &pos, &start, &end))
        if (append_slice(out, text, start, end) < 0) return -1;
    return 0;
}

/* The next capitalised run from *pos on: 1 and its bounds, *pos after it; 0 when none. */
static int next_cap_run(const uint16_t *f, Py_ssize_t n, Py_ssize_t *pos, Py_ssize_t *start, Py_ssize_t *end) {
    Py_ssize_t i = *pos;
    while (i < n && !(f[i] & SC_LU)) i++;
    if (i >= n) {
        *pos = n;
        return 0;
    }
    Py_ssize_t e = cap_token_end(f, n, i);
    for (int tokens = 1; tokens < CAP_TOKENS_MAX; tokens++) {
        Py_ssize_t j = e;
        while (j < n && (f[j] & SC_WS)) j++;
        if (j == e || j >= n || !(f[j] & SC_LU)) break;
        e = cap_token_end(f, n, j);
    }
    *start = i;
    *end = *pos = e;
    return 1;
}

static int find_cap_runs(PyObject *text, const uint16_t *f, Py_ssize_t n, PyObject *runs, PyObject *starts) {
    Py_ssize_t pos = 0, start, end;
    while (next_cap_run(f, n, &pos, &start, &end)) {
        if (append_slice(runs, text, start, end) < 0) return -1;
        if (PyList_Append(starts, at_sentence_start(f, start) ? Py_True : Py_False) < 0) return -1;
    }
    return 0;
}

/* A weak token starts only at the start of a maximal run of [\p{L}\p{N}'’@-], with an \p{Ll}; it
   is the run up to its first @, kept at 3 characters or more (``weak_tokens``). From *pos on: 1 and
   the token's bounds, with *pos after its run, or 0 when there is none left. */
static int next_weak_token(const uint16_t *f, Py_ssize_t n, Py_ssize_t *pos, Py_ssize_t *start, Py_ssize_t *end) {
    Py_ssize_t i = *pos;
    while (i < n) {
        if (!(f[i] & WEAK_RUN)) {
            i++;
            continue;
        }
        int found = 0;
        if (f[i] & SC_LL) {
            Py_ssize_t j = i + 1;
            while (j < n && (f[j] & WEAK_CHAR)) j++;
            if (j - i >= 3) {
                *start = i;
                *end = j;
                found = 1;
            }
            i = j;
        }
        while (i < n && (f[i] & WEAK_RUN)) i++;
        if (found) {
            *pos = i;
            return 1;
        }
    }
    *pos = n;
    return 0;
}

static int find_weak_tokens(PyObject *text, const uint16_t *f, Py_ssize_t n, PyObject *out) {
    Py_ssize_t pos = 0, start, end;
    while (next_weak_token(f, n, &pos, &start, &end))
        if (append_slice(out, text, start, end) < 0) return -1;
    return 0;
}

static int find_cjk_runs(PyObject *text, const uint16_t *f, Py_ssize_t n, PyObject *out) {
    Py_ssize_t i = 0;
    while (i < n) {
        if (!(f[i] & F_CJK)) {
            i++;
            continue;
        }
        Py_ssize_t j = i + 1;
        while (j < n && (f[j] & F_CJK)) j++;
        if (j - i >= 2 && append_slice(out, text, i, j) < 0) return -1;
        i = j;
    }
    return 0;
}

#define STACK_CHARS 512

/* Every character's flags into f (PyUnicode_GET_LENGTH(text) of them); the union of them all. */
static uint16_t classify_text(PyObject *text, uint16_t *f) {
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    uint16_t seen = 0;
    if (kind == PyUnicode_1BYTE_KIND) {
        const Py_UCS1 *s = data;
        for (Py_ssize_t i = 0; i < n; i++) seen |= f[i] = s[i] < 128 ? ascii_flags[s[i]] : classify(s[i]);
    } else if (kind == PyUnicode_2BYTE_KIND) {
        const Py_UCS2 *s = data;
        for (Py_ssize_t i = 0; i < n; i++) seen |= f[i] = classify(s[i]);
    } else {
        const Py_UCS4 *s = data;
        for (Py_ssize_t i = 0; i < n; i++) seen |= f[i] = classify(s[i]);
    }
    return seen;
}

/* The entry of scan() and extract(): checks that ``text`` is a str, and classifies its characters
   into ``stack`` when they fit, else into a new buffer the caller frees (``f != stack``). Sets
   ``*n`` and ``*seen`` (every class found); NULL with an exception set when it cannot. */
static uint16_t *classified(PyObject *text, const char *who, uint16_t *stack, Py_ssize_t *n, uint16_t *seen) {
    if (!PyUnicode_Check(text)) {
        PyErr_Format(PyExc_TypeError, "%s() takes a str", who);
        return NULL;
    }
    if (PyUnicode_READY(text) < 0) return NULL;
    *n = PyUnicode_GET_LENGTH(text);
    uint16_t *f = *n <= STACK_CHARS ? stack : PyMem_Malloc((size_t)*n * sizeof(uint16_t));
    if (f == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    *seen = classify_text(text, f);
    return f;
}

/* scan(text) -> (handles, runs, run_starts, weak_tokens, cjk_runs): see the module comment. */
static PyObject *scan(PyObject *self, PyObject *text) {
    (void)self;
    Py_ssize_t n;
    uint16_t stack[STACK_CHARS], seen;
    uint16_t *f = classified(text, "scan", stack, &n, &seen);
    if (f == NULL) return NULL;
    PyObject *handles = PyList_New(0), *runs = PyList_New(0), *starts = PyList_New(0);
    PyObject *tokens = PyList_New(0), *cjk = PyList_New(0), *result = NULL;
    if (handles == NULL || runs == NULL || starts == NULL || tokens == NULL || cjk == NULL) goto done;
    if ((seen & F_AT) && find_handles(text, f, n, handles) < 0) goto done;
    if ((seen & SC_LU) && find_cap_runs(text, f, n, runs, starts) < 0) goto done;
    if ((seen & SC_LL) && find_weak_tokens(text, f, n, tokens) < 0) goto done;
    if ((seen & F_CJK) && find_cjk_runs(text, f, n, cjk) < 0) goto done;
    result = PyTuple_Pack(5, handles, runs, starts, tokens, cjk);
done:
    Py_XDECREF(handles);
    Py_XDECREF(runs);
    Py_XDECREF(starts);
    Py_XDECREF(tokens);
    Py_XDECREF(cjk);
    if (f != stack) PyMem_Free(f);
    return result;
}

/* ---- First sighting of a printable-ASCII capitalised run (``extract._surface``) ----

   A new surface cost ~9k instructions in Python calls (split, strip, possessive, lowercase, the
   stopword sets, ``normalize_alias``), for what is, in printable ASCII, byte work. This does that
   work for a run whose characters are all printable ASCII and whose sightings' norms need no more
   than a lowercase (``normalize.is_plain``); for anything else it returns None and
   ``extract._surface`` takes the Python steps. ``tests/unit/core/test_cscan.py`` compares the two. */

#define KEEP 0
#define DROP 1
#define KEEP_IF_MID 2
#define SIGHT_MAX 1024 /* longer runs (none in practice) go the Python way */

static PyObject *ascii_str(const char *s, Py_ssize_t n) {
    PyObject *out = PyUnicode_New(n, 127);
    if (out != NULL) memcpy(PyUnicode_1BYTE_DATA(out), s, (size_t)n);
    return out;
}

static Py_ssize_t strip_possessive_len(const char *s, Py_ssize_t n) {
    if (n >= 2 && (s[n - 1] == 's' || s[n - 1] == 'S') && s[n - 2] == '\'') n -= 2;
    if (n > 0 && s[n - 1] == '\'') n -= 1;
    return n;
}

/* 1: ``lowercase(s[:n]) in words``; 0: not; -1: error. */
static int lower_in(const char *s, Py_ssize_t n, PyObject *words, char *buf) {
    for (Py_ssize_t i = 0; i < n; i++) buf[i] = (s[i] >= 'A' && s[i] <= 'Z') ? (char)(s[i] + 32) : s[i];
    PyObject *low = ascii_str(buf, n);
    if (low == NULL) return -1;
    int found = PySet_Contains(words, low);
    Py_DECREF(low);
    return found;
}

/* ``_sighting(raw, raw)`` for printable ASCII ``raw`` = s[:n], or NULL with no error set when the
   norm is not a plain lowercase (the caller then answers None). ``whole``: the object of s[:n]. */
static PyObject *ascii_sighting(PyObject *whole, const char *s, Py_ssize_t n, PyObject *stopwords, PyObject *common,
                                char *buf) {
    Py_ssize_t a = 0, b = n;
    while (a < b && s[a] == ' ') a++; /* strip(JS_WHITESPACE): the space is printable ASCII's only one */
    while (b > a && s[b - 1] == ' ') b--;
    Py_ssize_t qn = strip_possessive_len(s + a, b - a);
    const char *q = s + a;
    /* normalize_alias(query): a plain text's norm is its lowercase; the empty query's norm is ''. */
    int has_space = 0, double_space = 0;
    for (Py_ssize_t i = 0; i < qn; i++) {
        if (q[i] == ' ') {
            has_space = 1;
            if (i + 1 < qn && q[i + 1] == ' ') double_space = 1;
        }
    }
    if (qn > 0 && (double_space || strchr(" \"'`[(", q[0]) != NULL || strchr(" \"'`])", q[qn - 1]) != NULL)) return NULL;
    /* The norm is the query's lowercase, which is also what the stopword sets are asked about. */
    for (Py_ssize_t i = 0; i < qn; i++) buf[i] = (q[i] >= 'A' && q[i] <= 'Z') ? (char)(q[i] + 32) : q[i];
    PyObject *norm = ascii_str(buf, qn);
    if (norm == NULL) return NULL;
    int klass = KEEP;
    if (!has_space) {
        int drop = qn < 2 || (q[0] >= '0' && q[0] <= '9');
        if (drop && qn >= 2) { /* [0-9][0-9.,]* in full */
            for (Py_ssize_t i = 1; i < qn; i++)
                if (!((q[i] >= '0' && q[i] <= '9') || q[i] == '.' || q[i] == ',')) drop = 0;
        }
        if (!drop) {
            int stop = PySet_Contains(stopwords, norm);
            int soft = stop == 0 ? PySet_Contains(common, norm) : 0;
            if (stop < 0 || soft < 0) {
                Py_DECREF(norm);
                return NULL;
            }
            if (stop) drop = 1;
            else klass = soft ? KEEP_IF_MID : KEEP;
        }
        if (drop) klass = DROP;
    }
    PyObject *display = (a == 0 && b == n) ? (Py_INCREF(whole), whole) : ascii_str(s + a, b - a);
    PyObject *query = (a == 0 && qn == n) ? (Py_INCREF(whole), whole) : ascii_str(q, qn);
    PyObject *kl = PyLong_FromLong(klass);
    PyObject *cand = NULL, *out = NULL;
    if (display != NULL && query != NULL && norm != NULL && kl != NULL) {
        cand = atomic(PyTuple_Pack(4, display, query, norm, Py_False));
        if (cand != NULL) out = atomic(PyTuple_Pack(5, display, query, norm, kl, cand));
    }
    Py_XDECREF(display);
    Py_XDECREF(query);
    Py_XDECREF(norm);
    Py_XDECREF(kl);
    Py_XDECREF(cand);
    if (out == NULL && !PyErr_Occurred()) PyErr_NoMemory();
    return out;
}

/* ascii_surface(surface, stopwords, common_words) -> extract._surface(surface), or None when the
   surface is not all printable ASCII or a sighting's norm is more than its lowercase. */
static PyObject *ascii_surface_impl(PyObject *surface, PyObject *stopwords, PyObject *common) {
    if (PyUnicode_READY(surface) < 0) return NULL;
    Py_ssize_t n = PyUnicode_GET_LENGTH(surface);
    if (!PyUnicode_IS_ASCII(surface) || n > SIGHT_MAX) Py_RETURN_NONE;
    const char *s = (const char *)PyUnicode_1BYTE_DATA(surface);
    for (Py_ssize_t i = 0; i < n; i++)
        if (s[i] < 0x20 || s[i] > 0x7e) Py_RETURN_NONE;
    char buf[SIGHT_MAX];
    /* The leading tokens (str.split) that are hard stopwords once possessive-stripped and lowercased. */
    Py_ssize_t i = 0, first_kept = 0, kept_from = -1;
    while (i < n) {
        while (i < n && s[i] == ' ') i++;
        if (i >= n) break;
        Py_ssize_t start = i;
        while (i < n && s[i] != ' ') i++;
        int stop = lower_in(s + start, strip_possessive_len(s + start, i - start), stopwords, buf);
        if (stop < 0) return NULL;
        if (!stop) {
            kept_from = start;
            break;
        }
        first_kept++;
    }
    PyObject *run = ascii_sighting(surface, s, n, stopwords, common, buf);
    if (run == NULL) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    PyObject *trimmed = Py_None;
    Py_INCREF(trimmed);
    if (first_kept > 0 && kept_from >= 0) { /* 0 < first_kept < len(tokens) */
        /* " ".join(the tokens from the first kept one) */
        Py_ssize_t m = 0;
        for (Py_ssize_t j = kept_from; j < n;) {
            while (j < n && s[j] == ' ') j++;
            if (j >= n) break;
            if (m) buf[m++] = ' ';
            while (j < n && s[j] != ' ') buf[m++] = s[j++];
        }
        PyObject *rest = ascii_str(buf, m);
        Py_DECREF(trimmed);
        trimmed = rest == NULL ? NULL : ascii_sighting(rest, (const char *)PyUnicode_1BYTE_DATA(rest), m, stopwords, common, buf);
        Py_XDECREF(rest);
        if (trimmed == NULL) {
            Py_DECREF(run);
            if (PyErr_Occurred()) return NULL;
            Py_RETURN_NONE;
        }
    }
    PyObject *out = atomic(PyTuple_Pack(2, run, trimmed));
    Py_DECREF(run);
    Py_DECREF(trimmed);
    return out;
}

static PyObject *ascii_surface(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 3 || !PyUnicode_Check(args[0]) || !PyAnySet_Check(args[1]) || !PyAnySet_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "ascii_surface(str, set, set)");
        return NULL;
    }
    return ascii_surface_impl(args[0], args[1], args[2]);
}

/* ---- A turn's candidates (``extract._extract_scanned`` over ``scan``'s findings) ----

   ``_extract_scanned`` in C: the same caches (the dicts of extract.py, handed over once by
   ``configure``), the same Python functions for what is not in them, the same filters and caps.
   What it saves is the glue: the lists of findings, a Python-level loop over them, and the weak
   tokens after the cap, which are not even cut out of the text. ``tests/unit/core/test_cscan.py``
   compares it with ``extract._extract_python``. */

static struct {
    PyObject *surface_cache, *handle_cache, *weak_cache; /* dict */
    Py_ssize_t cache_max;
    PyObject *stopwords, *common_words;                   /* frozenset */
    PyObject *sighting, *surface, *weak, *normalize;     /* callables of extract.py */
    PyObject *not_weak, *at;                             /* _NOT_WEAK, "@" */
    Py_ssize_t max_candidates, max_weak, max_cjk;
    int ready;
} X;

static PyObject *configure(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *sc, *hc, *wc, *stop, *common, *sighting, *surface, *weak, *cjk, *not_weak;
    Py_ssize_t cache_max, max_candidates, max_weak, max_cjk;
    if (!PyArg_ParseTuple(args, "O!O!O!nO!O!OOOOOnnn", &PyDict_Type, &sc, &PyDict_Type, &hc, &PyDict_Type, &wc,
                          &cache_max, &PyFrozenSet_Type, &stop, &PyFrozenSet_Type, &common, &sighting, &surface, &weak,
                          &cjk, &not_weak, &max_candidates, &max_weak, &max_cjk))
        return NULL;
    PyObject *at = PyUnicode_FromString("@");
    if (at == NULL) return NULL;
    PyObject *keep[] = {sc, hc, wc, stop, common, sighting, surface, weak, cjk, not_weak};
    for (size_t k = 0; k < sizeof keep / sizeof keep[0]; k++) Py_INCREF(keep[k]);
    if (X.ready) {
        PyObject *old[] = {X.surface_cache, X.handle_cache, X.weak_cache, X.stopwords, X.common_words, X.sighting,
                           X.surface, X.weak, X.normalize, X.not_weak, X.at};
        for (size_t k = 0; k < sizeof old / sizeof old[0]; k++) Py_DECREF(old[k]);
    }
    X.surface_cache = sc, X.handle_cache = hc, X.weak_cache = wc, X.cache_max = cache_max;
    X.stopwords = stop, X.common_words = common, X.sighting = sighting, X.surface = surface, X.weak = weak;
    X.normalize = cjk, X.not_weak = not_weak, X.at = at;
    X.max_candidates = max_candidates, X.max_weak = max_weak, X.max_cjk = max_cjk, X.ready = 1;
    Py_RETURN_NONE;
}

/* ``_bounded(cache)[key] = value``: a full cache starts over. */
static int bounded_set(PyObject *cache, PyObject *key, PyObject *value) {
    if (PyDict_GET_SIZE(cache) >= X.cache_max) PyDict_Clear(cache);
    return PyDict_SetItem(cache, key, value);
}

/* The cached value of key (a new reference), made by make(key) and stored on a miss. */
static PyObject *cached(PyObject *cache, PyObject *key, PyObject *(*make)(PyObject *)) {
    PyObject *found = PyDict_GetItemWithError(cache, key);
    if (found != NULL) {
        Py_INCREF(found);
        return found;
    }
    if (PyErr_Occurred()) return NULL;
    PyObject *made = make(key);
    if (made == NULL) return NULL;
    if (bounded_set(cache, key, made) < 0) {
        Py_DECREF(made);
        return NULL;
    }
    return made;
}

static PyObject *make_handle(PyObject *handle) {
    PyObject *at_handle = PyUnicode_Concat(X.at, handle);
    if (at_handle == NULL) return NULL;
    PyObject *out = PyObject_CallFunctionObjArgs(X.sighting, at_handle, handle, NULL);
    Py_DECREF(at_handle);
    return out;
}

static PyObject *make_surface(PyObject *surface) {
    PyObject *out = ascii_surface_impl(surface, X.stopwords, X.common_words);
    if (out != Py_None) return out;
    Py_DECREF(out);
    return PyObject_CallOneArg(X.surface, surface);
}

/* ``extract._weak(token) or _NOT_WEAK`` for an ASCII token of up to SIGHT_MAX characters whose norm
   is its plain lowercase (no quote at its end once possessive-stripped); NULL with no error set for
   any other token (the caller then asks ``_weak``). A weak token is letters, digits, ' and -,
   starting with a lowercase letter: printable, nothing to trim at its start. */
static PyObject *ascii_weak(PyObject *token) {
    if (!PyUnicode_IS_ASCII(token) || PyUnicode_GET_LENGTH(token) > SIGHT_MAX) return NULL;
    const char *s = (const char *)PyUnicode_1BYTE_DATA(token);
    Py_ssize_t len = PyUnicode_GET_LENGTH(token), n = strip_possessive_len(s, len);
    for (Py_ssize_t i = 0; i < len; i++)
        if (s[i] < 0x21 || s[i] > 0x7e) return NULL; /* printable, and no space: no "  " either */
    if (n < 3) { /* utf16_len(raw) < 3 */
        Py_INCREF(X.not_weak);
        return X.not_weak;
    }
    if (strchr("\"'`[(", s[0]) != NULL || strchr("\"'`])", s[n - 1]) != NULL) return NULL;
    /* The norm: the token itself when it is its own lowercase (most words), which also reuses the
       hash its cache lookup computed; else its lowercase, made. */
    int upper = 0;
    for (Py_ssize_t i = 0; i < n; i++) upper |= s[i] >= 'A' && s[i] <= 'Z';
    PyObject *norm;
    if (!upper && n == len) {
        Py_INCREF(token);
        norm = token;
    } else {
        char buf[SIGHT_MAX];
        for (Py_ssize_t i = 0; i < n; i++) buf[i] = (s[i] >= 'A' && s[i] <= 'Z') ? (char)(s[i] + 32) : s[i];
        norm = ascii_str(buf, n);
        if (norm == NULL) return NULL;
    }
    int skip = PySet_Contains(X.stopwords, norm);
    if (skip == 0) skip = PySet_Contains(X.common_words, norm);
    if (skip != 0) {
        Py_DECREF(norm);
        if (skip < 0) return NULL;
        Py_INCREF(X.not_weak);
        return X.not_weak;
    }
    PyObject *raw = n == len ? (Py_INCREF(token), token) : ascii_str(s, n);
    PyObject *out = raw == NULL ? NULL : atomic(PyTuple_Pack(4, raw, raw, norm, Py_True));
    Py_XDECREF(raw);
    Py_DECREF(norm);
    return out;
}

static PyObject *make_weak(PyObject *token) {
    PyObject *out = ascii_weak(token);
    if (out != NULL || PyErr_Occurred()) return out;
    out = PyObject_CallOneArg(X.weak, token);
    if (out == Py_None) {
        Py_DECREF(out);
        Py_INCREF(X.not_weak);
        return X.not_weak;
    }
    return out;
}

/* A sighting's (size 5) or weak candidate's (size 4) norm, item 2, borrowed; NULL with an error
   when item is not such a tuple. */
static PyObject *norm_of(PyObject *item, Py_ssize_t size) {
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != size) {
        PyErr_SetString(PyExc_TypeError, "a cached sighting or candidate is not a tuple of its size");
        return NULL;
    }
    PyObject *norm = PyTuple_GET_ITEM(item, 2);
    if (!PyUnicode_Check(norm)) {
        PyErr_SetString(PyExc_TypeError, "a norm is not a str");
        return NULL;
    }
    return norm;
}

/* first.setdefault(norm, sighting); with mid_too, mid.add(norm). */
static int sight(PyObject *first, PyObject *mid, PyObject *norm, PyObject *sighting, int mid_too) {
    if (PyDict_SetDefault(first, norm, sighting) == NULL) return -1;
    return mid_too ? PySet_Add(mid, norm) : 0;
}

/* One n-gram [s, e) of a CJK run (``_cjk_run_grams``): 1 when the cap is reached, 0 done, -1 error. */
static int cjk_gram(PyObject *text, const uint16_t *f, Py_ssize_t s, Py_ssize_t e, PyObject *out, PyObject *taken,
                    Py_ssize_t *count) {
    if (*count >= X.max_cjk) return 1;
    int hiragana = 1, plain = 1;
    for (Py_ssize_t i = s; i < e; i++) {
        hiragana &= (f[i] & F_HIRA) != 0;
        plain &= (f[i] & F_CJK_PLAIN) != 0;
    }
    if (hiragana) return 0; /* no pure-hiragana gram */
    PyObject *gram = PyUnicode_Substring(text, s, e);
    if (gram == NULL) return -1;
    PyObject *norm = plain ? (Py_INCREF(gram), gram) : PyObject_CallOneArg(X.normalize, gram);
    int rc = norm == NULL ? -1 : 0;
    if (rc == 0 && !PyUnicode_Check(norm)) {
        PyErr_SetString(PyExc_TypeError, "normalize_alias did not return a str");
        rc = -1;
    }
    if (rc == 0 && PyUnicode_GET_LENGTH(norm)) {
        int in = PySet_Contains(taken, norm);
        if (in < 0) rc = -1;
        else if (!in) {
            PyObject *cand = atomic(PyTuple_Pack(4, gram, gram, norm, Py_True));
            rc = cand == NULL || PySet_Add(taken, norm) < 0 || PyList_Append(out, cand) < 0 ? -1 : 0;
            Py_XDECREF(cand);
            (*count)++;
        }
    }
    Py_DECREF(gram);
    Py_XDECREF(norm);
    return rc;
}

/* ``_cjk_run_grams`` of the text's CJK runs of 2 characters or more: a run of up to 4 whole, else
   its 4-, 3- and 2-grams per start; at most max_cjk new norms. */
static int cjk_grams(PyObject *text, const uint16_t *f, Py_ssize_t n, PyObject *out, PyObject *taken) {
    Py_ssize_t count = 0, i = 0;
    while (i < n) {
        if (!(f[i] & F_CJK)) {
            i++;
            continue;
        }
        Py_ssize_t j = i + 1;
        while (j < n && (f[j] & F_CJK)) j++;
        Py_ssize_t len = j - i;
        int rc = 0;
        if (len >= 2 && len <= 4) {
            rc = cjk_gram(text, f, i, j, out, taken, &count);
        } else if (len > 4) {
            for (Py_ssize_t a = 0; rc == 0 && a < len - 1; a++)
                for (Py_ssize_t m = 4; rc == 0 && m >= 2; m--)
                    if (a + m <= len) rc = cjk_gram(text, f, i + a, i + a + m, out, taken, &count);
        }
        if (rc != 0) return rc < 0 ? -1 : 0;
        i = j;
    }
    return 0;
}

static PyObject *extract(PyObject *self, PyObject *text) {
    (void)self;
    if (!X.ready) {
        PyErr_SetString(PyExc_RuntimeError, "_cscan.configure() was not called");
        return NULL;
    }
    Py_ssize_t n;
    uint16_t stack[STACK_CHARS], seen;
    uint16_t *f = classified(text, "extract", stack, &n, &seen);
    if (f == NULL) return NULL;
    /* taken: the strong norms, then the weak ones too (Python's strong_norms | weak_seen: every test
       asks whether a norm is in either, and only weak and CJK norms are added after the strong). */
    PyObject *first = PyDict_New(), *mid = PySet_New(NULL), *out = PyList_New(0), *taken = PySet_New(NULL);
    PyObject *result = NULL;
    if (first == NULL || mid == NULL || out == NULL || taken == NULL) goto done;

    Py_ssize_t at = 0, start, end;
    while ((seen & F_AT) && next_handle(f, n, &at, &start, &end)) { /* the @handles: always mid-sentence */
        PyObject *handle = PyUnicode_Substring(text, start, end);
        if (handle == NULL) goto done;
        PyObject *sighting = cached(X.handle_cache, handle, make_handle);
        Py_DECREF(handle);
        if (sighting == NULL) goto done;
        PyObject *norm = norm_of(sighting, 5);
        int rc = norm == NULL ? -1 : PyUnicode_GET_LENGTH(norm) ? sight(first, mid, norm, sighting, 1) : 0;
        Py_DECREF(sighting);
        if (rc < 0) goto done;
    }
    at = 0;
    while ((seen & SC_LU) && next_cap_run(f, n, &at, &start, &end)) { /* the runs, and their rests after stopwords */
        PyObject *surface = PyUnicode_Substring(text, start, end);
        if (surface == NULL) goto done;
        PyObject *info = cached(X.surface_cache, surface, make_surface);
        Py_DECREF(surface);
        if (info == NULL) goto done;
        int rc = -1;
        if (!PyTuple_Check(info) || PyTuple_GET_SIZE(info) != 2) {
            PyErr_SetString(PyExc_TypeError, "a cached surface is not a pair");
        } else {
            PyObject *run = PyTuple_GET_ITEM(info, 0), *trimmed = PyTuple_GET_ITEM(info, 1);
            PyObject *norm = norm_of(run, 5);
            rc = norm == NULL ? -1 : 0;
            if (rc == 0 && PyUnicode_GET_LENGTH(norm))
                rc = sight(first, mid, norm, run, !at_sentence_start(f, start));
            if (rc == 0 && trimmed != Py_None) {
                PyObject *tnorm = norm_of(trimmed, 5);
                rc = tnorm == NULL ? -1 : PyUnicode_GET_LENGTH(tnorm) ? sight(first, mid, tnorm, trimmed, 1) : 0;
            }
        }
        Py_DECREF(info);
        if (rc < 0) goto done;
    }

    /* The strong candidates: first-seen order, the drop classes filtered, at most max_candidates. */
    Py_ssize_t pos = 0;
    PyObject *norm, *sighting;
    while (PyDict_Next(first, &pos, &norm, &sighting)) {
        long klass = PyLong_AsLong(PyTuple_GET_ITEM(sighting, 3));
        if (klass == -1 && PyErr_Occurred()) goto done;
        if (klass == DROP) continue;
        if (klass == KEEP_IF_MID) {
            int is_mid = PySet_Contains(mid, norm);
            if (is_mid < 0) goto done;
            if (!is_mid) continue;
        }
        if (PyList_Append(out, PyTuple_GET_ITEM(sighting, 4)) < 0 || PySet_Add(taken, norm) < 0) goto done;
        if (PyList_GET_SIZE(out) >= X.max_candidates) break;
    }

    if (seen & SC_LL) { /* the weak words, up to max_weak new norms; no token is cut out after that */
        Py_ssize_t count = 0;
        at = 0;
        while (count < X.max_weak && next_weak_token(f, n, &at, &start, &end)) {
            PyObject *token = PyUnicode_Substring(text, start, end);
            if (token == NULL) goto done;
            PyObject *weak = cached(X.weak_cache, token, make_weak);
            Py_DECREF(token);
            if (weak == NULL) goto done;
            PyObject *wnorm = norm_of(weak, 4);
            int rc = wnorm == NULL ? -1 : 0, skip = 1;
            if (rc == 0 && PyUnicode_GET_LENGTH(wnorm)) {
                int in = PySet_Contains(taken, wnorm);
                if (in < 0) rc = -1;
                else skip = in;
            }
            if (rc == 0 && !skip) {
                rc = PySet_Add(taken, wnorm);
                if (rc == 0) rc = PyList_Append(out, weak);
                count++;
            }
            Py_DECREF(weak);
            if (rc < 0) goto done;
        }
    }

    if ((seen & F_CJK) && cjk_grams(text, f, n, out, taken) < 0) goto done;
    result = out;
    out = NULL;
done:
    Py_XDECREF(first);
    Py_XDECREF(mid);
    Py_XDECREF(out);
    Py_XDECREF(taken);
    if (f != stack) PyMem_Free(f);
    return result;
}

/* ---- A window's merged candidates (``window.merge_window``) ----

   The merge read every sighting of every turn into a list per norm, up to three times for a crowded
   window (its kept norms, whether it is crowded, then all of them), and sorted key tuples through the
   generic comparison: ~2k instructions per sighting in the compiled core. Here a sighting is a few
   C reads and a dict lookup; the weights are computed in the same operation order on doubles (so
   the same floats), and the entries sorted by (-weight, order), which never tie. Whether a window
   is crowded comes out of its whole merge, which a crowded window needs anyway. Inputs of another
   shape than the core's own (a list of (role, list of 4-tuples)) get None: the Python merge then
   answers. ``tests/unit/core/test_cscan.py`` compares the two. */

typedef struct {
    PyObject *display, *query, *norm; /* borrowed from the candidate tuples, alive for the call */
    Py_hash_t hash;                   /* the norm's */
    int weak, newest, user;
    Py_ssize_t occ, last, order;
    double key; /* -weight */
} Entry;

/* The merge's entries in first-seen order, found by norm through an open-addressing table of their
   positions + 1 (0: empty), sized for every sighting of the window: a dict of positions cost a
   dict operation and an int object per new norm. Norms are compared as Python compares dict keys
   of str: same object, or same hash and equal text. */
typedef struct {
    Entry *items;
    Py_ssize_t count;
    Py_ssize_t *slots;
    size_t mask;
} Acc;

static struct {
    PyObject *cls; /* WindowCandidate */
    Py_ssize_t max_strong, max_weak;
} M;

static void acc_free(Acc *acc) {
    PyMem_Free(acc->items);
    PyMem_Free(acc->slots);
    acc->items = NULL;
    acc->slots = NULL;
}

/* The slot of ``norm``: its entry's, or the empty one where it goes; NULL with an error set. */
static Py_ssize_t *acc_slot(Acc *acc, PyObject *norm, Py_hash_t hash) {
    for (size_t i = (size_t)hash & acc->mask;; i = (i + 1) & acc->mask) {
        Py_ssize_t *slot = &acc->slots[i];
        if (*slot == 0) return slot;
        Entry *e = &acc->items[*slot - 1];
        if (e->norm == norm) return slot;
        if (e->hash == hash) {
            int cmp = PyUnicode_Compare(e->norm, norm);
            if (cmp == 0) return slot;
            if (cmp == -1 && PyErr_Occurred()) return NULL;
        }
    }
}

/* 0: merged; 1: an input of another shape (answer None); -1: error. ``kept`` NULL: every norm. */
static int accumulate(PyObject *rows, PyObject *kept, Acc *acc, Py_ssize_t *strong_seen, Py_ssize_t *weak_seen) {
    acc->items = NULL;
    acc->slots = NULL;
    acc->count = 0;
    Py_ssize_t n = PyList_GET_SIZE(rows), sightings = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *row = PyList_GET_ITEM(rows, i);
        if (!PyTuple_CheckExact(row) || PyTuple_GET_SIZE(row) != 2 || !PyList_CheckExact(PyTuple_GET_ITEM(row, 1)))
            return 1;
        sightings += PyList_GET_SIZE(PyTuple_GET_ITEM(row, 1));
    }
    size_t capacity = 16;
    while (capacity < 2 * (size_t)sightings + 1) capacity *= 2;
    acc->items = PyMem_Malloc((size_t)(sightings + 1) * sizeof(Entry));
    acc->slots = PyMem_Calloc(capacity, sizeof(Py_ssize_t));
    acc->mask = capacity - 1;
    if (acc->items == NULL || acc->slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *row = PyList_GET_ITEM(rows, i);
        PyObject *role = PyTuple_GET_ITEM(row, 0), *cands = PyTuple_GET_ITEM(row, 1);
        int is_user = PyUnicode_Check(role) && PyUnicode_CompareWithASCIIString(role, "user") == 0;
        int newest = i == n - 1;
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(cands); k++) {
            PyObject *c = PyList_GET_ITEM(cands, k);
            if (!PyTuple_CheckExact(c) || PyTuple_GET_SIZE(c) != 4) return 1;
            PyObject *display = PyTuple_GET_ITEM(c, 0), *query = PyTuple_GET_ITEM(c, 1);
            PyObject *norm = PyTuple_GET_ITEM(c, 2), *weak_obj = PyTuple_GET_ITEM(c, 3);
            if (!PyUnicode_CheckExact(display) || !PyUnicode_CheckExact(query) || !PyUnicode_CheckExact(norm)
                || !PyBool_Check(weak_obj))
                return 1;
            int weak = weak_obj == Py_True;
            if (kept != NULL) {
                if (weak) (*weak_seen)++;
                else (*strong_seen)++;
                int in = PySet_Contains(kept, norm);
                if (in < 0) return -1;
                if (!in) continue;
            }
            Py_hash_t hash = PyObject_Hash(norm);
            if (hash == -1) return -1;
            Py_ssize_t *slot = acc_slot(acc, norm, hash);
            if (slot == NULL) return -1;
            if (*slot == 0) {
                Entry *e = &acc->items[acc->count];
                e->display = display, e->query = query, e->norm = norm, e->hash = hash;
                e->weak = weak, e->occ = 1, e->newest = newest, e->user = is_user, e->last = i;
                e->order = acc->count++;
                *slot = acc->count;
                continue;
            }
            Entry *e = &acc->items[*slot - 1];
            e->occ++;
            e->last = i;
            if (newest) e->newest = 1;
            if (e->weak && !weak) {
                e->weak = 0;
                if (!e->user || is_user) e->display = display;
            }
            if (is_user && !e->user) {
                e->display = display;
                e->user = 1;
            }
        }
    }
    return 0;
}

static int by_key(const void *a, const void *b) {
    const Entry *x = *(Entry *const *)a, *y = *(Entry *const *)b;
    if (x->key < y->key) return -1;
    if (x->key > y->key) return 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

static PyObject *window_candidate(const Entry *e) {
    PyTypeObject *cls = (PyTypeObject *)M.cls;
    PyObject *t = cls->tp_alloc(cls, 9);
    if (t == NULL) return NULL;
    PyObject *items[9] = {e->display, e->query, e->norm, e->weak ? Py_True : Py_False, PyLong_FromSsize_t(e->occ),
                          e->newest ? Py_True : Py_False, e->user ? Py_True : Py_False,
                          PyLong_FromSsize_t(e->last), PyLong_FromSsize_t(e->order)};
    if (items[4] == NULL || items[7] == NULL || items[8] == NULL) {
        Py_XDECREF(items[4]);
        Py_XDECREF(items[7]);
        Py_XDECREF(items[8]);
        Py_DECREF(t);
        return NULL;
    }
    for (int k = 0; k < 9; k++) {
        if (k != 4 && k != 7 && k != 8) Py_INCREF(items[k]);
        PyTuple_SET_ITEM(t, k, items[k]);
    }
    return atomic(t);
}

/* The first ``cap`` of ``kind`` (0 strong, 1 weak) by (-weight, order), those in ``only`` (NULL:
   all), appended to ``out`` as WindowCandidates. */
static int append_top(PyObject *out, Entry **sorted, Py_ssize_t count, Py_ssize_t cap, PyObject *only) {
    for (Py_ssize_t k = 0; k < count && k < cap; k++) {
        if (only != NULL) {
            int in = PySet_Contains(only, sorted[k]->norm);
            if (in < 0) return -1;
            if (!in) continue;
        }
        PyObject *c = window_candidate(sorted[k]);
        if (c == NULL) return -1;
        int rc = PyList_Append(out, c);
        Py_DECREF(c);
        if (rc < 0) return -1;
    }
    return 0;
}

/* ``_salience_ordered``: strong then weak, each by salience and capped; of those, ``only``'s. */
static PyObject *salience_ordered(Acc *acc, Py_ssize_t n, PyObject *only) {
    Entry **strong = PyMem_Malloc((size_t)(acc->count + 1) * sizeof(Entry *));
    Entry **weak = PyMem_Malloc((size_t)(acc->count + 1) * sizeof(Entry *));
    PyObject *out = NULL;
    if (strong == NULL || weak == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t ns = 0, nw = 0;
    for (Py_ssize_t k = 0; k < acc->count; k++) {
        Entry *e = &acc->items[k];
        double weight = (double)(e->last + 1) / (double)n;
        weight = weight + (double)(e->occ < 4 ? e->occ : 4) * 0.1;
        weight = weight + (e->user ? 0.15 : 0.0);
        e->key = -weight;
        if (e->weak) weak[nw++] = e;
        else strong[ns++] = e;
    }
    qsort(strong, (size_t)ns, sizeof(Entry *), by_key);
    qsort(weak, (size_t)nw, sizeof(Entry *), by_key);
    out = PyList_New(0);
    if (out == NULL) goto done;
    if (append_top(out, strong, ns, M.max_strong, only) < 0 || append_top(out, weak, nw, M.max_weak, only) < 0)
        Py_CLEAR(out);
done:
    PyMem_Free(strong);
    PyMem_Free(weak);
    return out;
}

static PyObject *configure_merge(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *cls;
    Py_ssize_t max_strong, max_weak;
    if (!PyArg_ParseTuple(args, "O!nn", &PyType_Type, &cls, &max_strong, &max_weak)) return NULL;
    if (!PyType_IsSubtype((PyTypeObject *)cls, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "the window candidate class must be a tuple type");
        return NULL;
    }
    Py_INCREF(cls);
    Py_XSETREF(M.cls, cls);
    M.max_strong = max_strong, M.max_weak = max_weak;
    Py_RETURN_NONE;
}

/* merge(rows, kept) -> merge_window(rows, kept) for a non-empty list of rows, or None. */
static PyObject *merge(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "merge(rows, kept)");
        return NULL;
    }
    PyObject *rows = args[0], *kept = args[1] == Py_None ? NULL : args[1];
    if (M.cls == NULL || !PyList_CheckExact(rows) || PyList_GET_SIZE(rows) == 0
        || (kept != NULL && !PyFrozenSet_CheckExact(kept)))
        Py_RETURN_NONE;
    Py_ssize_t n = PyList_GET_SIZE(rows), strong_seen = 0, weak_seen = 0;
    Acc acc, whole;
    whole.items = NULL;
    whole.slots = NULL;
    PyObject *out = NULL;
    int rc = accumulate(rows, kept, &acc, &strong_seen, &weak_seen);
    if (rc == 0 && kept != NULL && (strong_seen > M.max_strong || weak_seen > M.max_weak)) {
        /* Crowded when the whole merge holds more norms of a kind than it keeps: then its kept norms,
           in its order, are the answer. */
        rc = accumulate(rows, NULL, &whole, &strong_seen, &weak_seen);
        if (rc == 0) {
            Py_ssize_t strong_norms = 0;
            for (Py_ssize_t k = 0; k < whole.count; k++) strong_norms += !whole.items[k].weak;
            if (strong_norms > M.max_strong || whole.count - strong_norms > M.max_weak) {
                out = salience_ordered(&whole, n, kept);
                goto done;
            }
        }
    }
    if (rc == 0) out = salience_ordered(&acc, n, NULL);
done:
    acc_free(&acc);
    acc_free(&whole);
    if (rc == 1) Py_RETURN_NONE;
    return rc < 0 ? NULL : out;
}

/* ---- A window's turns (``window.parse_window``) ----

   The op's ``role: text`` grammar over a window's lines, as ``window.parse_window`` and
   ``turn_prefix`` read it: a line opening with ``user`` or ``assistant`` (ASCII case folded), JS
   whitespace, a colon and at most one whitespace starts a turn, unless a line terminator follows
   later in it; other lines continue the current turn (before any, a non-blank one starts a user
   turn); a turn's body is its lines joined by ``\n`` with its leading empty lines dropped, trimmed
   of JS whitespace, and kept when not empty. Lines are cut at ``\n``, each dropping one ``\r`` before
   it. ~2k instructions per line in the compiled core, for reads of characters. Compared with the
   Python steps by ``tests/unit/core/test_cscan.py``. */

static PyObject *S_USER, *S_ASSISTANT;

#define READ(i) PyUnicode_READ(kind, data, (i))
#define IS_WS(c) (classify(c) & SC_WS)

/* Where the body of line [s, e) starts when the line opens a turn (its role in *role), else -1. */
static Py_ssize_t turn_prefix_at(int kind, const void *data, Py_ssize_t s, Py_ssize_t e, int terminators,
                                 PyObject **role) {
    static const char user[] = "user", assistant[] = "assistant";
    Py_ssize_t i, k;
    for (k = 0; k < 4 && s + k < e; k++) {
        Py_UCS4 c = READ(s + k);
        if (c >= 128 || (c >= 'A' && c <= 'Z' ? c + 32 : c) != (Py_UCS4)user[k]) break;
    }
    if (k == 4) {
        *role = S_USER;
        i = s + 4;
    } else {
        for (k = 0; k < 9 && s + k < e; k++) {
            Py_UCS4 c = READ(s + k);
            if (c >= 128 || (c >= 'A' && c <= 'Z' ? c + 32 : c) != (Py_UCS4)assistant[k]) break;
        }
        if (k != 9) return -1;
        *role = S_ASSISTANT;
        i = s + 9;
    }
    while (i < e && IS_WS(READ(i))) i++;
    if (i >= e || READ(i) != ':') return -1;
    i++;
    for (Py_ssize_t j = i + 1; terminators && j < e; j++) { /* none in a window without \r, U+2028, U+2029 */
        Py_UCS4 c = READ(j);
        if (c == '\r' || c == '\n' || c == 0x2028 || c == 0x2029) return -1;
    }
    if (i < e && IS_WS(READ(i))) i++;
    return i;
}

/* (role, body) appended to out for the text's [s, e) trimmed of JS whitespace, if anything is left. */
static int append_turn(PyObject *out, PyObject *role, PyObject *text, Py_ssize_t s, Py_ssize_t e) {
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    while (s < e && IS_WS(READ(s))) s++;
    while (e > s && IS_WS(READ(e - 1))) e--;
    if (s == e) return 0;
    PyObject *body = PyUnicode_Substring(text, s, e);
    if (body == NULL) return -1;
    PyObject *turn = atomic(PyTuple_Pack(2, role, body));
    Py_DECREF(body);
    if (turn == NULL) return -1;
    int rc = PyList_Append(out, turn);
    Py_DECREF(turn);
    return rc;
}

static PyObject *parse_window(PyObject *self, PyObject *text) {
    (void)self;
    if (!PyUnicode_Check(text)) Py_RETURN_NONE;
    if (PyUnicode_READY(text) < 0) return NULL;
    Py_ssize_t n = PyUnicode_GET_LENGTH(text), lines = 1;
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    /* PyUnicode_FindChar: memchr on the usual one-byte text, where a loop read every character. */
    int has_cr = PyUnicode_FindChar(text, '\r', 0, n, 1) >= 0;
    int terminators = has_cr || (kind != PyUnicode_1BYTE_KIND && (PyUnicode_FindChar(text, 0x2028, 0, n, 1) >= 0
                                                                   || PyUnicode_FindChar(text, 0x2029, 0, n, 1) >= 0));
    for (Py_ssize_t at = PyUnicode_FindChar(text, '\n', 0, n, 1); at >= 0;
         at = PyUnicode_FindChar(text, '\n', at + 1, n, 1))
        lines++;
    /* Line k is [start[k], end[k]); a turn is (role, first line, where its body starts in it, last line). */
    Py_ssize_t *start = PyMem_Malloc((size_t)lines * 5 * sizeof(Py_ssize_t));
    PyObject **roles = PyMem_Malloc((size_t)lines * sizeof(PyObject *));
    PyObject *out = PyList_New(0), *pieces = NULL;
    if (start == NULL || roles == NULL) {
        PyErr_NoMemory();
        Py_CLEAR(out);
    }
    if (out == NULL) goto done;
    Py_ssize_t *end = start + lines, *first = start + 2 * lines, *from = start + 3 * lines, *last = start + 4 * lines;
    Py_ssize_t line_start = 0;
    for (Py_ssize_t k = 0; k < lines; k++) {
        Py_ssize_t i = k == lines - 1 ? n : PyUnicode_FindChar(text, '\n', line_start, n, 1);
        start[k] = line_start;
        end[k] = i;
        if (has_cr && i < n && i > line_start && READ(i - 1) == '\r') end[k] = i - 1; /* not the last line */
        line_start = i + 1;
    }
    Py_ssize_t turns = 0;
    for (Py_ssize_t l = 0; l < lines; l++) {
        PyObject *role = NULL;
        Py_ssize_t body = turn_prefix_at(kind, data, start[l], end[l], terminators, &role);
        if (body >= 0) {
            roles[turns] = role, first[turns] = l, from[turns] = body, last[turns] = l;
            turns++;
        } else if (turns > 0) {
            last[turns - 1] = l;
        } else {
            Py_ssize_t j = start[l];
            while (j < end[l] && IS_WS(READ(j))) j++;
            if (j < end[l]) {
                roles[turns] = S_USER, first[turns] = l, from[turns] = start[l], last[turns] = l;
                turns++;
            }
        }
    }
    for (Py_ssize_t t = 0; t < turns; t++) {
        /* _join_body: the leading empty lines dropped (the last one always stays), then joined by \n. */
        Py_ssize_t l = first[t], s = from[t];
        while (l < last[t] && s == end[l]) {
            l++;
            s = start[l];
        }
        int rc;
        if (l == last[t] || !has_cr) { /* one line, or lines still one \n apart in the text */
            rc = append_turn(out, roles[t], text, s, end[last[t]]);
        } else {
            pieces = PyList_New(0);
            rc = pieces == NULL ? -1 : append_slice(pieces, text, s, end[l]);
            for (Py_ssize_t m = l + 1; rc == 0 && m <= last[t]; m++) rc = append_slice(pieces, text, start[m], end[m]);
            PyObject *sep = rc == 0 ? PyUnicode_FromOrdinal('\n') : NULL;
            PyObject *joined = sep == NULL ? NULL : PyUnicode_Join(sep, pieces);
            Py_XDECREF(sep);
            Py_CLEAR(pieces);
            rc = joined == NULL ? -1 : append_turn(out, roles[t], joined, 0, PyUnicode_GET_LENGTH(joined));
            Py_XDECREF(joined);
        }
        if (rc < 0) {
            Py_CLEAR(out);
            goto done;
        }
    }
done:
    PyMem_Free(start);
    PyMem_Free(roles);
    return out;
}

#undef READ
#undef IS_WS

/* class_table() -> bytes: the table's flags (SC_LU | SC_LL | SC_L | SC_N | SC_WS) of every code point
   0..0x10FFFF, for the test that compares them with ``regex``'s classes on every one. */
static PyObject *class_table(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    PyObject *out = PyBytes_FromStringAndSize(NULL, 0x110000);
    if (out == NULL) return NULL;
    char *bytes = PyBytes_AS_STRING(out);
    for (Py_UCS4 c = 0; c < 0x110000; c++) bytes[c] = (char)(classify(c) & 0x1F);
    return out;
}

/* cjk_plain_table() -> bytes: cjk_plain() of every code point 0..0xFFFF, for its test. */
static PyObject *cjk_plain_table(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    PyObject *out = PyBytes_FromStringAndSize(NULL, 0x10000);
    if (out == NULL) return NULL;
    char *bytes = PyBytes_AS_STRING(out);
    for (Py_UCS4 c = 0; c < 0x10000; c++) bytes[c] = (char)((classify(c) & F_CJK_PLAIN) != 0);
    return out;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_O, "scan(text) -> (handles, runs, run_starts, weak_tokens, cjk_runs)"},
    {"ascii_surface", (PyCFunction)(void (*)(void))ascii_surface, METH_FASTCALL,
     "ascii_surface(surface, stopwords, common_words) -> extract._surface(surface), or None"},
    {"configure", configure, METH_VARARGS,
     "configure(surface_cache, handle_cache, weak_cache, cache_max, stopwords, common_words, sighting, surface, "
     "weak, normalize, not_weak, max_candidates, max_weak, max_cjk): extract.py's caches and functions, for extract()"},
    {"extract", extract, METH_O, "extract(text) -> extract._extract_scanned(text, scan(text))"},
    {"configure_merge", configure_merge, METH_VARARGS,
     "configure_merge(WindowCandidate, max_candidates, max_weak): what merge() builds and keeps"},
    {"merge", (PyCFunction)(void (*)(void))merge, METH_FASTCALL, "merge(rows, kept) -> merge_window(rows, kept), or None"},
    {"parse_window", parse_window, METH_O, "parse_window(text) -> window.parse_window(text) for a str, else None"},
    {"cjk_plain_table", cjk_plain_table, METH_NOARGS, "cjk_plain_table() -> which BMP characters are plain CJK"},
    {"class_table", class_table, METH_NOARGS, "class_table() -> the Unicode class flags of every code point"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_cscan", "The C scanner of extract.py (see _cscan.c).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__cscan(void) {
    init_ascii_flags();
    if (S_USER == NULL && ((S_USER = PyUnicode_InternFromString("user")) == NULL
                           || (S_ASSISTANT = PyUnicode_InternFromString("assistant")) == NULL))
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddStringConstant(m, "REGEX_VERSION", SC_REGEX_VERSION) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
