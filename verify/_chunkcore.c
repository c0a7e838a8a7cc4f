/*
 * _chunkcore: the optional compiled core of a chunk check (verify/storechunk.py).
 *
 * Why it exists: a store record's checks cost ~14 us of CPython work, the hash and HMAC they
 * need ~1 us in OpenSSL. This module walks a chunk's lines and, for each line it can prove,
 * does in C exactly what the pure path does: the canonical grammar (as the DFA table that
 * verify/grammardfa.py builds from the grammar's own regular expressions), UTF-8 validity,
 * seq and time order, the RFC 6962 leaf hash and the HMAC chain. It decides nothing of its
 * own: every rule's definition is in Python, and the first line it cannot prove (the DFA
 * rejects it, it is not valid UTF-8, too long, out of seq or time order) goes back to the
 * Python path, which decides and names the problem. The pure path stays the reference; the
 * tests hold both to the same verdicts.
 *
 * Cryptography is OpenSSL's (libcrypto 3: EVP digests and EVP_MAC HMAC), as Python's hashlib
 * and hmac use it; nothing here implements a primitive.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <openssl/crypto.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#if OPENSSL_VERSION_NUMBER < 0x30000000L
#error "_chunkcore needs OpenSSL 3 (EVP_MAC)"
#endif

#define TOP_MEMBERS 8
#define MAX_BODY_MEMBERS 32
#define DIGEST 32
#define FOLD 4 /* bytes per kind in prepare's folds */
#define FOLD_WRITE 1
#define FOLD_DELETE 2

/* One member of a canonical object: where its key's opening quote, its value and the end of
 * its value are. */
typedef struct {
    Py_ssize_t key;
    Py_ssize_t start;
    Py_ssize_t end;
} member_t;

/* The end of the JSON value starting at s[i], in a line the DFA proved canonical (so well
 * formed); bounded by n all the same. */
static Py_ssize_t skip_value(const unsigned char *s, Py_ssize_t i, Py_ssize_t n) {
    if (i >= n) return n;
    if (s[i] == '"') {
        for (i++; i < n; i++) {
            if (s[i] == '\\') i++;
            else if (s[i] == '"') return i + 1;
        }
        return n;
    }
    if (s[i] == '{' || s[i] == '[') {
        int depth = 0;
        for (; i < n; i++) {
            unsigned char c = s[i];
            if (c == '"') {
                i = skip_value(s, i, n) - 1;
            } else if (c == '{' || c == '[') {
                depth++;
            } else if (c == '}' || c == ']') {
                if (--depth == 0) return i + 1;
            }
        }
        return n;
    }
    while (i < n && s[i] != ',' && s[i] != '}' && s[i] != ']') i++;
    return i;
}

/* The members of the object at s[i] (which must be '{'): up to max of them into out; returns
 * their count, or -1 when the text is not an object of at most max members. */
static int split_object(const unsigned char *s, Py_ssize_t i, Py_ssize_t n, member_t *out,
                        int max) {
    int count = 0;
    if (i >= n || s[i] != '{') return -1;
    i++;
    if (i < n && s[i] == '}') return 0;
    while (i < n) {
        if (count == max || s[i] != '"') return -1;
        out[count].key = i;
        i = skip_value(s, i, n);
        if (i >= n || s[i] != ':') return -1;
        i++;
        out[count].start = i;
        i = skip_value(s, i, n);
        out[count].end = i;
        count++;
        if (i >= n) return -1;
        if (s[i] == '}') return count;
        if (s[i] != ',') return -1;
        i++;
    }
    return -1;
}

/* Strict UTF-8 (RFC 3629, Unicode table 3-7): no overlong forms, no surrogates, nothing past
 * U+10FFFF; what Python's "utf-8" decoder accepts. */
static int valid_utf8(const unsigned char *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int need;
        unsigned char lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) need = 1;
        else if (c == 0xE0) { need = 2; lo = 0xA0; }
        else if (c >= 0xE1 && c <= 0xEC) need = 2;
        else if (c == 0xED) { need = 2; hi = 0x9F; }
        else if (c >= 0xEE && c <= 0xEF) need = 2;
        else if (c == 0xF0) { need = 3; lo = 0x90; }
        else if (c >= 0xF1 && c <= 0xF3) need = 3;
        else if (c == 0xF4) { need = 3; hi = 0x8F; }
        else return 0;
        if (i + need >= n) return 0;
        if (s[i + 1] < lo || s[i + 1] > hi) return 0;
        for (int k = 2; k <= need; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xBF) return 0;
        i += need + 1;
    }
    return 1;
}

/* The DFA's end states of up to LANES lines walked in lockstep: one line's walk is a chain of
 * dependent loads, so several lines at once keep the core busy. ``table`` holds next-state
 * offsets (state * classes); offset 0 is the dead state, whose row leads back to it. */
#define LANES 4
static void walk_lanes(const uint32_t *table, const unsigned char *cls, uint32_t start,
                       const unsigned char **text, const Py_ssize_t *len, int lanes,
                       uint32_t *out) {
    uint32_t state[LANES];
    Py_ssize_t shortest = PY_SSIZE_T_MAX;
    for (int l = 0; l < lanes; l++) {
        state[l] = start;
        if (len[l] < shortest) shortest = len[l];
    }
    Py_ssize_t k = 0;
    if (lanes == LANES) {
        const unsigned char *a = text[0], *b = text[1], *c = text[2], *d = text[3];
        uint32_t sa = start, sb = start, sc = start, sd = start;
        for (; k < shortest; k++) {
            sa = table[sa + cls[a[k]]];
            sb = table[sb + cls[b[k]]];
            sc = table[sc + cls[c[k]]];
            sd = table[sd + cls[d[k]]];
        }
        state[0] = sa;
        state[1] = sb;
        state[2] = sc;
        state[3] = sd;
    }
    for (int l = 0; l < lanes; l++) {
        uint32_t st = state[l];
        const unsigned char *t = text[l];
        for (Py_ssize_t j = k; j < len[l] && st; j++) st = table[st + cls[t[j]]];
        out[l] = st;
    }
}

static int is_ascii(const unsigned char *s, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++)
        if (s[i] & 0x80) return 0;
    return 1;
}

static int hexval(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

static int unhex(const unsigned char *s, unsigned char *out) {
    for (int k = 0; k < DIGEST; k++) {
        int a = hexval(s[2 * k]), b = hexval(s[2 * k + 1]);
        if (a < 0 || b < 0) return 0;
        out[k] = (unsigned char)(a << 4 | b);
    }
    return 1;
}

static int write_buffer(PyObject *obj, Py_buffer *view, const char *what) {
    if (PyObject_GetBuffer(obj, view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Format(PyExc_TypeError, "%s must be a writable contiguous buffer", what);
        return 0;
    }
    return 1;
}

static int leaf_hash(EVP_MD_CTX *ctx, const EVP_MD *sha256, const unsigned char *s, Py_ssize_t n,
                     unsigned char *out) {
    static const unsigned char prefix = 0x00;
    unsigned int len = 0;
    return EVP_DigestInit_ex2(ctx, sha256, NULL) && EVP_DigestUpdate(ctx, &prefix, 1) &&
           EVP_DigestUpdate(ctx, s, (size_t)n) && EVP_DigestFinal_ex(ctx, out, &len);
}

static EVP_MAC_CTX *keyed_hmac(const unsigned char *key, Py_ssize_t key_len) {
    EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    if (mac == NULL) return NULL;
    EVP_MAC_CTX *ctx = EVP_MAC_CTX_new(mac);
    EVP_MAC_free(mac);
    if (ctx == NULL) return NULL;
    char digest[] = "SHA256";
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
        OSSL_PARAM_construct_end(),
    };
    if (!EVP_MAC_init(ctx, key, (size_t)key_len, params)) {
        EVP_MAC_CTX_free(ctx);
        return NULL;
    }
    return ctx;
}

/* A store's grammar automaton and its reading rules, checked and copied once (prepare), then
 * used by every check of that store's chunks. */
typedef struct {
    uint32_t *table; /* next-state offsets (state * classes); offset 0: the dead state */
    Py_ssize_t entries;
    Py_ssize_t classes;
    unsigned char byte_class[256];
    unsigned char *accept; /* per state: kind index, or 255 */
    Py_ssize_t states;
    uint32_t start; /* the start state's offset */
    unsigned char *folds; /* per kind, FOLD bytes: body members, task and path member, op */
    Py_ssize_t kinds;
    int seq_member, time_member, mac_member;
    Py_ssize_t max_line;
    EVP_MD *sha256;
    EVP_MAC_CTX *hmac; /* keyed; NULL without a key */
} prepared_t;

#define CAPSULE "harness.verify._chunkcore.prepared"

static void prepared_release(prepared_t *p) {
    PyMem_Free(p->table);
    PyMem_Free(p->accept);
    PyMem_Free(p->folds);
    if (p->sha256) EVP_MD_free(p->sha256);
    if (p->hmac) EVP_MAC_CTX_free(p->hmac);
    PyMem_Free(p);
}

static void prepared_free(PyObject *capsule) {
    prepared_t *p = PyCapsule_GetPointer(capsule, CAPSULE);
    if (p != NULL) prepared_release(p);
}

PyDoc_STRVAR(prepare_doc,
"prepare(table, byte_class, accept, classes, start, folds, seq_member, time_member,\n"
"        mac_member, key, max_line) -> prepared\n\n"
"Check and keep a store's automaton (table: uint32 next-state offsets, state * classes;\n"
"byte_class: 256 class numbers; accept: per state the kind index or 255; start: the start\n"
"state), per kind 4 bytes (folds: its body's member count, the indices of its task and path\n"
"members, and 0, or FOLD_WRITE or FOLD_DELETE for a kind the lineage fold counts), the\n"
"envelope members' indices, the HMAC key (bytes or None) and the longest line to prove.");

static PyObject *prepare(PyObject *self, PyObject *args) {
    Py_buffer table, byte_class, accept, folds;
    Py_ssize_t classes, start, max_line;
    int seq_member, time_member, mac_member;
    PyObject *key_obj;
    if (!PyArg_ParseTuple(args, "y*y*y*nny*iiiOn", &table, &byte_class, &accept, &classes,
                          &start, &folds, &seq_member, &time_member, &mac_member, &key_obj,
                          &max_line))
        return NULL;
    PyObject *capsule = NULL;
    prepared_t *p = PyMem_Calloc(1, sizeof(prepared_t));
    if (p == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (byte_class.len != 256 || classes <= 0 || classes > 256 || accept.len < 2 ||
        table.len != accept.len * 4 * classes || start <= 0 || start >= accept.len ||
        seq_member < 0 || seq_member >= TOP_MEMBERS || time_member < 0 ||
        time_member >= TOP_MEMBERS || mac_member < 1 || mac_member >= TOP_MEMBERS ||
        folds.len < FOLD || folds.len % FOLD || folds.len / FOLD > 255 || max_line < 0) {
        PyErr_SetString(PyExc_ValueError, "inconsistent automaton or member indices");
        goto fail;
    }
    p->entries = table.len / 4;
    p->classes = classes;
    p->states = accept.len;
    p->kinds = folds.len / FOLD;
    p->start = (uint32_t)(start * classes);
    p->seq_member = seq_member;
    p->time_member = time_member;
    p->mac_member = mac_member;
    p->max_line = max_line;
    memcpy(p->byte_class, byte_class.buf, 256);
    p->table = PyMem_Malloc((size_t)table.len);
    p->accept = PyMem_Malloc((size_t)accept.len);
    p->folds = PyMem_Malloc((size_t)folds.len);
    if (p->table == NULL || p->accept == NULL || p->folds == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    memcpy(p->table, table.buf, (size_t)table.len);
    memcpy(p->accept, accept.buf, (size_t)accept.len);
    memcpy(p->folds, folds.buf, (size_t)folds.len);
    for (Py_ssize_t b = 0; b < 256; b++)
        if (p->byte_class[b] >= classes) {
            PyErr_SetString(PyExc_ValueError, "byte class out of range");
            goto fail;
        }
    for (Py_ssize_t e = 0; e < p->entries; e++)
        if (p->table[e] % classes || p->table[e] >= p->entries) {
            PyErr_SetString(PyExc_ValueError, "automaton entry out of range");
            goto fail;
        }
    for (Py_ssize_t e = 0; e < classes; e++)
        if (p->table[e] != 0) {
            PyErr_SetString(PyExc_ValueError, "the dead state must lead to itself");
            goto fail;
        }
    for (Py_ssize_t e = 0; e < p->states; e++)
        if (p->accept[e] != 255 && p->accept[e] >= p->kinds) {
            PyErr_SetString(PyExc_ValueError, "accepting state names an unknown kind");
            goto fail;
        }
    for (Py_ssize_t e = 0; e < p->kinds; e++) {
        const unsigned char *f = p->folds + FOLD * e;
        if (f[0] > MAX_BODY_MEMBERS || f[3] > FOLD_DELETE ||
            (f[3] && (f[1] >= f[0] || f[2] >= f[0]))) {
            PyErr_SetString(PyExc_ValueError, "inconsistent fold of a kind");
            goto fail;
        }
    }
    p->sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
    if (p->sha256 == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "OpenSSL SHA-256 unavailable");
        goto fail;
    }
    if (key_obj != Py_None) {
        Py_buffer key;
        if (PyObject_GetBuffer(key_obj, &key, PyBUF_SIMPLE) < 0) goto fail;
        p->hmac = keyed_hmac((const unsigned char *)key.buf, key.len);
        PyBuffer_Release(&key);
        if (p->hmac == NULL) {
            PyErr_SetString(PyExc_RuntimeError, "OpenSSL HMAC-SHA256 unavailable");
            goto fail;
        }
    }
    capsule = PyCapsule_New(p, CAPSULE, prepared_free);
    if (capsule != NULL) goto done;
fail:
    if (p != NULL) prepared_release(p);
done:
    PyBuffer_Release(&table);
    PyBuffer_Release(&byte_class);
    PyBuffer_Release(&accept);
    PyBuffer_Release(&folds);
    return capsule;
}

PyDoc_STRVAR(check_doc,
"check(lines, first, prepared, seq, prev_time, prev_mac, leaves, counts, fold)\n"
"    -> (stop, mismatch, first_time, last_time, last_mac)\n\n"
"Walk lines[first:] while each is proven: accepted by the automaton, valid UTF-8, within\n"
"max_line, seq equal to the expected one, time not before prev_time. For each proven line:\n"
"its leaf hash into leaves[32*i:], its kind counted in counts (uint32 per kind), its MAC\n"
"checked against HMAC(key, prev_mac || input) while prev_mac is not None (mismatch: the\n"
"first line that does not chain, or -1; checking stops there). With fold = (last, writes,\n"
"merged), a line of a folded kind whose task's JSON text is in merged (any task when None)\n"
"sets last[path text] to its index i (a write, also counted in writes[path text]) or to\n"
"None (a delete). stop is the first line not proven (len(lines) when all were); last_mac\n"
"the MAC the last proven line states.");

/* A proven line of a folded kind: where its task and path texts are, for the fold that runs
 * once the interpreter lock is held again. */
typedef struct {
    Py_ssize_t line;
    Py_ssize_t task_start, task_end, path_start, path_end;
    unsigned char op;
} folded_t;

/* The lineage fold of one proven line (see check's doc). 0 on a Python error. */
static int fold_line(PyObject *last, PyObject *writes, PyObject *merged, const unsigned char *s,
                     const folded_t *f) {
    if (merged != Py_None) {
        PyObject *text =
            PyBytes_FromStringAndSize((const char *)s + f->task_start, f->task_end - f->task_start);
        if (text == NULL) return 0;
        int in = PySequence_Contains(merged, text);
        Py_DECREF(text);
        if (in <= 0) return in == 0;
    }
    PyObject *path =
        PyBytes_FromStringAndSize((const char *)s + f->path_start, f->path_end - f->path_start);
    if (path == NULL) return 0;
    int ok = 0;
    if (f->op == FOLD_WRITE) {
        PyObject *seen = PyDict_GetItemWithError(writes, path);
        if (seen == NULL && PyErr_Occurred()) goto out;
        long before = seen == NULL ? 0 : PyLong_AsLong(seen);
        if (before == -1 && PyErr_Occurred()) goto out;
        PyObject *after = PyLong_FromLong(before + 1);
        if (after == NULL) goto out;
        int set = PyDict_SetItem(writes, path, after);
        Py_DECREF(after);
        if (set < 0) goto out;
        PyObject *index = PyLong_FromSsize_t(f->line);
        if (index == NULL) goto out;
        set = PyDict_SetItem(last, path, index);
        Py_DECREF(index);
        ok = set == 0;
    } else {
        ok = PyDict_SetItem(last, path, Py_None) == 0;
    }
out:
    Py_DECREF(path);
    return ok;
}

/* What the lock-free walk over a chunk's lines needs and finds. */
typedef struct {
    const prepared_t *p;
    const unsigned char **text; /* text[k], len[k]: line first + k */
    Py_ssize_t *len;
    Py_ssize_t first, count; /* lines [first, count) have text and len */
    Py_ssize_t from;         /* where the next walk starts (its seq: seq + from - first) */
    long long seq;
    unsigned char *leaves;
    uint32_t *kind_counts;
    int fold;
    folded_t *folded;
    Py_ssize_t folded_used;
    int chaining;
    unsigned char chained[DIGEST];
    EVP_MD_CTX *md;
    EVP_MAC_CTX *hmac;
    Py_ssize_t mismatch;
    const unsigned char *last_time, *first_time, *last_mac_hex;
    Py_ssize_t last_time_len, first_time_len;
    int crypto_failed;
} walk_t;

/* Prove lines from w->from on, up to the first that is not proven; returns its index. Runs
 * without the interpreter lock: it reads only immutable line bytes and C buffers. */
static Py_ssize_t walk(walk_t *w) {
    const prepared_t *p = w->p;
    const uint32_t *tab = p->table;
    const Py_ssize_t classes = p->classes;
    const unsigned char *cls = p->byte_class, *acc = p->accept;
    unsigned char claimed[DIGEST], computed[DIGEST];
    member_t top[TOP_MEMBERS], body[MAX_BODY_MEMBERS];
    uint32_t walked[LANES];
    Py_ssize_t walked_from = w->from, walked_to = w->from;
    long long seq = w->seq + (w->from - w->first);
    Py_ssize_t i = w->from;
    for (; i < w->count; i++, seq++) {
        const unsigned char *s = w->text[i - w->first];
        const Py_ssize_t n = w->len[i - w->first];
        /* the grammar, LANES lines at a time */
        if (i >= walked_to) {
            int lanes = 0;
            while (lanes < LANES && i + lanes < w->count) lanes++;
            walk_lanes(tab, cls, p->start, w->text + (i - w->first), w->len + (i - w->first), lanes,
                       walked);
            walked_from = i;
            walked_to = i + lanes;
        }
        const uint32_t state = walked[i - walked_from];
        if (!state) break;
        const unsigned int kind = acc[state / classes];
        if (kind == 255) break;
        if (!is_ascii(s, n) && !valid_utf8(s, n)) break;
        /* its facts */
        if (split_object(s, 0, n, top, TOP_MEMBERS) != TOP_MEMBERS) break;
        const member_t *seq_m = &top[p->seq_member], *time_m = &top[p->time_member],
                       *mac_m = &top[p->mac_member];
        if (seq_m->end - seq_m->start > 15 || seq_m->end <= seq_m->start ||
            time_m->end - time_m->start < 2 || mac_m->end - mac_m->start != 2 * DIGEST + 2)
            break;
        long long value = 0;
        Py_ssize_t k = seq_m->start;
        for (; k < seq_m->end && s[k] >= '0' && s[k] <= '9'; k++) value = value * 10 + (s[k] - '0');
        if (k != seq_m->end || value != seq) break;
        const unsigned char *t = s + time_m->start + 1;
        const Py_ssize_t t_len = time_m->end - time_m->start - 2;
        {
            Py_ssize_t common = t_len < w->last_time_len ? t_len : w->last_time_len;
            int order = memcmp(t, w->last_time, (size_t)common);
            if (order < 0 || (order == 0 && t_len < w->last_time_len)) break;
        }
        const unsigned char *f = p->folds + FOLD * kind;
        const int folded = w->fold && f[3];
        if (folded && split_object(s, top[0].start, n, body, f[0]) != f[0]) break;
        /* proven: record it */
        if (!leaf_hash(w->md, p->sha256, s, n, w->leaves + i * DIGEST)) {
            w->crypto_failed = 1;
            break;
        }
        w->kind_counts[kind]++;
        if (folded) {
            folded_t *out = &w->folded[w->folded_used++];
            out->line = i;
            out->task_start = body[f[1]].start;
            out->task_end = body[f[1]].end;
            out->path_start = body[f[2]].start;
            out->path_end = body[f[2]].end;
            out->op = f[3];
        }
        if (w->first_time == NULL) {
            w->first_time = t;
            w->first_time_len = t_len;
        }
        w->last_time = t;
        w->last_time_len = t_len;
        w->last_mac_hex = s + mac_m->start + 1;
        if (w->chaining) {
            /* the MAC covers the line without ,"mac":"<hex>" */
            const Py_ssize_t cut = mac_m->key - 1, resume = mac_m->end;
            size_t out_len = 0;
            if (!EVP_MAC_init(w->hmac, NULL, 0, NULL) ||
                !EVP_MAC_update(w->hmac, w->chained, DIGEST) ||
                !EVP_MAC_update(w->hmac, s, (size_t)cut) ||
                !EVP_MAC_update(w->hmac, s + resume, (size_t)(n - resume)) ||
                !EVP_MAC_final(w->hmac, computed, &out_len, DIGEST) || out_len != DIGEST) {
                w->crypto_failed = 1;
                break;
            }
            if (!unhex(w->last_mac_hex, claimed) || CRYPTO_memcmp(computed, claimed, DIGEST)) {
                w->mismatch = i;
                w->chaining = 0;
            } else {
                memcpy(w->chained, computed, DIGEST);
            }
        }
    }
    return i;
}

static PyObject *check(PyObject *self, PyObject *args) {
    PyObject *lines, *capsule, *prev_time_obj, *prev_mac_obj, *leaves_obj, *counts_obj, *fold;
    Py_ssize_t first;
    long long seq;
    if (!PyArg_ParseTuple(args, "O!nOLOOOOO", &PyList_Type, &lines, &first, &capsule, &seq,
                          &prev_time_obj, &prev_mac_obj, &leaves_obj, &counts_obj, &fold))
        return NULL;
    const prepared_t *p = PyCapsule_GetPointer(capsule, CAPSULE);
    if (p == NULL) return NULL;
    if (fold != Py_None && (!PyTuple_Check(fold) || PyTuple_GET_SIZE(fold) != 3 ||
                            !PyDict_Check(PyTuple_GET_ITEM(fold, 0)) ||
                            !PyDict_Check(PyTuple_GET_ITEM(fold, 1)))) {
        PyErr_SetString(PyExc_TypeError, "fold must be None or (dict, dict, merged)");
        return NULL;
    }
    PyObject *result = NULL;
    Py_buffer leaves = {0}, counts = {0}, prev_time = {0}, prev_mac = {0};
    int have_leaves = 0, have_counts = 0, have_time = 0, have_mac = 0;
    walk_t w;
    memset(&w, 0, sizeof w);
    w.mismatch = -1;

    if (!write_buffer(leaves_obj, &leaves, "leaves")) goto done;
    have_leaves = 1;
    if (!write_buffer(counts_obj, &counts, "counts")) goto done;
    have_counts = 1;
    if (PyObject_GetBuffer(prev_time_obj, &prev_time, PyBUF_SIMPLE) < 0) goto done;
    have_time = 1;
    if (prev_mac_obj != Py_None) {
        if (PyObject_GetBuffer(prev_mac_obj, &prev_mac, PyBUF_SIMPLE) < 0) goto done;
        have_mac = 1;
        if (prev_mac.len != DIGEST) {
            PyErr_SetString(PyExc_ValueError, "prev_mac must be 32 bytes");
            goto done;
        }
        if (p->hmac == NULL) {
            PyErr_SetString(PyExc_ValueError, "a MAC to chain from needs a key");
            goto done;
        }
    }
    const Py_ssize_t count = PyList_GET_SIZE(lines);
    if (first < 0 || first > count || leaves.len < count * DIGEST ||
        counts.len < p->kinds * (Py_ssize_t)sizeof(uint32_t)) {
        PyErr_SetString(PyExc_ValueError, "first, leaves or counts out of range");
        goto done;
    }
    /* what the walk reads: each line's bytes, up to the first that is not bytes or too long */
    w.p = p;
    w.first = first;
    w.seq = seq;
    w.leaves = (unsigned char *)leaves.buf;
    w.kind_counts = (uint32_t *)counts.buf;
    w.fold = fold != Py_None;
    w.last_time = (const unsigned char *)prev_time.buf;
    w.last_time_len = prev_time.len;
    w.text = PyMem_Malloc(sizeof(*w.text) * (size_t)(count - first + 1));
    w.len = PyMem_Malloc(sizeof(*w.len) * (size_t)(count - first + 1));
    w.folded = PyMem_Malloc(sizeof(*w.folded) * (size_t)(count - first + 1));
    w.md = EVP_MD_CTX_new();
    if (w.text == NULL || w.len == NULL || w.folded == NULL || w.md == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (have_mac) {
        w.hmac = EVP_MAC_CTX_dup(p->hmac);
        if (w.hmac == NULL) {
            PyErr_SetString(PyExc_RuntimeError, "OpenSSL HMAC-SHA256 unavailable");
            goto done;
        }
        w.chaining = 1;
        memcpy(w.chained, prev_mac.buf, DIGEST);
    }
    /* Lines are gathered (what the walk reads without the lock) in blocks that double while
     * every line is proven: a walk that stops early, where the pure path takes over for one
     * line, gathered little more than it walked, so a chunk costs O(lines) however often. */
    Py_ssize_t stop = first, block = 16;
    int gathered_all = 0;
    w.count = first;
    for (;;) {
        const Py_ssize_t upto = count - w.count < block ? count : w.count + block;
        while (w.count < upto) {
            PyObject *item = PyList_GET_ITEM(lines, w.count);
            if (!PyBytes_Check(item) || PyBytes_GET_SIZE(item) > p->max_line) break;
            w.text[w.count - first] = (const unsigned char *)PyBytes_AS_STRING(item);
            w.len[w.count - first] = PyBytes_GET_SIZE(item);
            w.count++;
        }
        gathered_all = w.count < upto || w.count == count;
        w.from = stop;
        Py_BEGIN_ALLOW_THREADS
        stop = walk(&w);
        Py_END_ALLOW_THREADS
        if (w.crypto_failed || stop < w.count || gathered_all) break;
        block *= 2;
    }
    if (w.crypto_failed) {
        PyErr_SetString(PyExc_RuntimeError, "OpenSSL SHA-256 or HMAC-SHA256 failed");
        goto done;
    }
    for (Py_ssize_t k = 0; k < w.folded_used; k++) {
        const folded_t *f = &w.folded[k];
        if (!fold_line(PyTuple_GET_ITEM(fold, 0), PyTuple_GET_ITEM(fold, 1),
                       PyTuple_GET_ITEM(fold, 2), w.text[f->line - first], f))
            goto done;
    }
    {
        PyObject *mac_out = Py_None;
        unsigned char raw[DIGEST];
        if (w.last_mac_hex != NULL && unhex(w.last_mac_hex, raw)) {
            mac_out = PyBytes_FromStringAndSize((const char *)raw, DIGEST);
            if (mac_out == NULL) goto done;
        } else {
            Py_INCREF(mac_out);
        }
        result = Py_BuildValue("nny#y#N", stop, w.mismatch,
                               w.first_time ? (const char *)w.first_time : "",
                               w.first_time ? w.first_time_len : 0,
                               (const char *)w.last_time, w.last_time_len, mac_out);
    }
done:
    PyMem_Free((void *)w.text);
    PyMem_Free(w.len);
    PyMem_Free(w.folded);
    if (w.hmac) EVP_MAC_CTX_free(w.hmac);
    if (w.md) EVP_MD_CTX_free(w.md);
    if (have_mac) PyBuffer_Release(&prev_mac);
    if (have_time) PyBuffer_Release(&prev_time);
    if (have_counts) PyBuffer_Release(&counts);
    if (have_leaves) PyBuffer_Release(&leaves);
    return result;
}

PyDoc_STRVAR(levels_doc,
"levels(leaves, count) -> list[bytes]\n\n"
"The RFC 6962 node levels over the first count 32-byte leaves: level h holds the roots of\n"
"the complete perfect subtrees of 2**h leaves (SHA-256(0x01 || left || right)), level 0\n"
"the leaves; each level one bytes object of 32-byte roots (merkle.subtree_levels, packed).");

static PyObject *levels(PyObject *self, PyObject *args) {
    Py_buffer leaves;
    Py_ssize_t count;
    if (!PyArg_ParseTuple(args, "y*n", &leaves, &count)) return NULL;
    PyObject *out = NULL, *row = NULL;
    EVP_MD_CTX *md = NULL;
    EVP_MD *sha256 = NULL;
    if (count < 0 || leaves.len < count * DIGEST) {
        PyErr_SetString(PyExc_ValueError, "count out of range");
        goto done;
    }
    out = PyList_New(0);
    if (out == NULL) goto done;
    row = PyBytes_FromStringAndSize((const char *)leaves.buf, count * DIGEST);
    if (row == NULL || PyList_Append(out, row) < 0) goto fail;
    md = EVP_MD_CTX_new();
    sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
    if (md == NULL || sha256 == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "OpenSSL SHA-256 unavailable");
        goto fail;
    }
    /* every level's bytes made first, then all hashed without the interpreter lock */
    while (count > 1) {
        count /= 2;
        Py_DECREF(row);
        row = PyBytes_FromStringAndSize(NULL, count * DIGEST);
        if (row == NULL || PyList_Append(out, row) < 0) goto fail;
    }
    {
        const Py_ssize_t height = PyList_GET_SIZE(out);
        int failed = 0;
        Py_BEGIN_ALLOW_THREADS
        static const unsigned char prefix = 0x01;
        for (Py_ssize_t h = 1; h < height && !failed; h++) {
            const unsigned char *below =
                (const unsigned char *)PyBytes_AS_STRING(PyList_GET_ITEM(out, h - 1));
            PyObject *level = PyList_GET_ITEM(out, h);
            unsigned char *dst = (unsigned char *)PyBytes_AS_STRING(level);
            const Py_ssize_t pairs = PyBytes_GET_SIZE(level) / DIGEST;
            for (Py_ssize_t k = 0; k < pairs; k++) {
                unsigned int len = 0;
                if (!EVP_DigestInit_ex2(md, sha256, NULL) || !EVP_DigestUpdate(md, &prefix, 1) ||
                    !EVP_DigestUpdate(md, below + 2 * k * DIGEST, 2 * DIGEST) ||
                    !EVP_DigestFinal_ex(md, dst + k * DIGEST, &len)) {
                    failed = 1;
                    break;
                }
            }
        }
        Py_END_ALLOW_THREADS
        if (failed) {
            PyErr_SetString(PyExc_RuntimeError, "OpenSSL SHA-256 failed");
            goto fail;
        }
    }
    goto done;
fail:
    Py_CLEAR(out);
done:
    Py_XDECREF(row);
    if (md) EVP_MD_CTX_free(md);
    if (sha256) EVP_MD_free(sha256);
    PyBuffer_Release(&leaves);
    return out;
}

PyDoc_STRVAR(pack_doc,
"pack(line, members) -> bytes\n\n"
"The JSON texts of the body members at the given indices (bytes) of a line check proved,\n"
"joined by newlines (lineage.pack_write).");

static PyObject *pack(PyObject *self, PyObject *args) {
    const unsigned char *s, *which;
    Py_ssize_t n, count;
    if (!PyArg_ParseTuple(args, "y#y#", &s, &n, &which, &count)) return NULL;
    member_t top[TOP_MEMBERS], body[MAX_BODY_MEMBERS];
    int members = split_object(s, 0, n, top, TOP_MEMBERS) == TOP_MEMBERS
                      ? split_object(s, top[0].start, n, body, MAX_BODY_MEMBERS)
                      : -1;
    Py_ssize_t size = count ? count - 1 : 0;
    for (Py_ssize_t k = 0; k < count; k++) {
        if (members < 0 || which[k] >= members) {
            PyErr_SetString(PyExc_ValueError, "not a record line with those body members");
            return NULL;
        }
        size += body[which[k]].end - body[which[k]].start;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, size);
    if (out == NULL) return NULL;
    char *dst = PyBytes_AS_STRING(out);
    for (Py_ssize_t k = 0; k < count; k++) {
        const member_t *m = &body[which[k]];
        if (k) *dst++ = '\n';
        memcpy(dst, s + m->start, (size_t)(m->end - m->start));
        dst += m->end - m->start;
    }
    return out;
}

static PyMethodDef methods[] = {
    {"pack", pack, METH_VARARGS, pack_doc},
    {"prepare", prepare, METH_VARARGS, prepare_doc},
    {"check", check, METH_VARARGS, check_doc},
    {"levels", levels, METH_VARARGS, levels_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_chunkcore",
    "The optional compiled core of a chunk check (see verify/storechunk.py).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__chunkcore(void) { return PyModule_Create(&module); }
