/*
 * einsum equations: parsing and checking as torch.einsum does, into the label
 * plan of linalg.h (placements and lowering are matmul.c's).
 *
 * Syntax: operand subscripts separated by ',', optionally "->" and the
 * output subscripts; letters a-z and A-Z; at most one "..." per term; spaces
 * are ignored. Without "->" the output is the ellipsis dims followed by the
 * letters that appear exactly once, in ASCII order (upper case first), as in
 * torch. With an explicit output that has no "...", the ellipsis dims are
 * summed. A letter's sizes must agree across its occurrences, or be 1
 * (broadcast); ellipsis dims broadcast from the right.
 *
 * Threads: pure functions, called on client threads and on the controller.
 */
#include <string.h>

#include "core/records/meta.h"
#include "ops/linalg.h"

#define MAX_EQ 256

static int letter_index(char c) {
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return 26 + (c - 'a');
    return -1;
}

static char index_letter(int i) { return (char)(i < 26 ? 'A' + i : 'a' + (i - 26)); }

/* One term: its letters (letter indexes, -1 marking the ellipsis position). */
typedef struct term {
    int n; /* entries in sym */
    int sym[DT_MAX_NDIM + 1];
    int ell; /* has an ellipsis */
} term;

/* Parses one term [s, e) of the stripped equation; `pos0` is s's index in
 * the stripped equation (for messages). `what` names the operand. */
static dt_status parse_term(const char *s, const char *e, int pos0, int operand, term *t) {
    memset(t, 0, sizeof *t);
    for (const char *c = s; c < e; c++) {
        if (*c == '.') {
            if (e - c < 3 || c[1] != '.' || c[2] != '.') {
                if (operand >= 0)
                    return dt__error(DT_EOP,
                                     "einsum(): found '.' for operand %d that is not part of any ellipsis",
                                     operand);
                return dt__error(DT_EOP, "einsum(): found '.' for output that is not part of any ellipsis");
            }
            if (t->ell) {
                if (operand >= 0)
                    return dt__error(
                        DT_EOP, "einsum(): found '.' for operand %d for which an ellipsis was already found",
                        operand);
                return dt__error(DT_EOP,
                                 "einsum(): found '.' for output for which an ellipsis was already found");
            }
            t->ell = 1;
            if (t->n > DT_MAX_NDIM)
                return dt__error(DT_EUNSUPPORTED, "einsum(): more than %d subscripts in a term", DT_MAX_NDIM);
            t->sym[t->n++] = -1;
            c += 2;
            continue;
        }
        int li = letter_index(*c);
        if (li < 0)
            return dt__error(
                DT_EOP,
                "einsum(): invalid subscript given at index %d in the equation string, subscripts must "
                "be in [a-zA-Z]",
                pos0 + (int)(c - s));
        if (t->n > DT_MAX_NDIM)
            return dt__error(DT_EUNSUPPORTED, "einsum(): more than %d subscripts in a term", DT_MAX_NDIM);
        t->sym[t->n++] = li;
    }
    return DT_OK;
}

/* Unifies a label's size with a new occurrence (broadcasting 1). */
static dt_status unify(dt__lplan *p, int l, int64_t size, char letter, int operand) {
    int64_t cur = p->lsize[l];
    if (cur == size || size == 1)
        return DT_OK;
    if (cur == 1) {
        p->lsize[l] = size;
        return DT_OK;
    }
    if (letter)
        return dt__error(DT_ESHAPE,
                         "einsum(): subscript %c has size %lld for operand %d which does not broadcast with "
                         "previously seen size %lld",
                         letter, (long long)size, operand, (long long)cur);
    return dt__error(
        DT_ESHAPE,
        "einsum(): operands do not broadcast: an ellipsis dim has size %lld for operand %d and %lld "
        "elsewhere",
        (long long)size, operand, (long long)cur);
}

/* The labels while a plan is built: one per letter, then the ellipsis's. */
typedef struct labels {
    int of_letter[52]; /* a letter's label (letter_index), -1 until seen */
    int count[52];     /* the letter's occurrences in the operand terms */
    int ell_dims[2];   /* each operand's ellipsis dims */
    int nell;          /* the widest operand's: the ellipsis labels */
    int ell[DT_MAX_NDIM];
} labels;

/* The equation without its spaces into eq[MAX_EQ] (*len its length). */
static dt_status strip_spaces(const char *equation, char *eq, size_t *len) {
    *len = 0;
    for (const char *c = equation; *c; c++) {
        if (*c == ' ')
            continue;
        if (*len + 1 >= MAX_EQ)
            return dt__error(DT_EINVAL, "einsum(): the equation is longer than %d characters", MAX_EQ - 1);
        eq[(*len)++] = *c;
    }
    eq[*len] = 0;
    return DT_OK;
}

/* The n operand terms, separated by ',' in [eq, lhs_end): exactly n. */
static dt_status parse_operands(const char *eq, const char *lhs_end, int n, term *terms) {
    int nterms = 0;
    const char *s = eq;
    for (;;) {
        const char *comma = memchr(s, ',', (size_t)(lhs_end - s));
        const char *e = comma ? comma : lhs_end;
        if (nterms == n)
            return dt__error(DT_EOP, "einsum(): fewer operands were provided than specified in the equation");
        if (parse_term(s, e, (int)(s - eq), nterms, &terms[nterms]) != DT_OK)
            return dt_last_status();
        nterms++;
        if (!comma)
            break;
        s = comma + 1;
    }
    if (nterms < n)
        return dt__error(DT_EOP, "einsum(): more operands were provided than specified in the equation");
    return DT_OK;
}

/* Checks each term's subscripts against its operand's dims, and makes the
 * ellipsis labels: as many as the widest operand's ellipsis, aligned right. */
static dt_status ellipsis_labels(dt__lplan *p, int n, const dt__meta *const *ms, const term *terms,
                                 labels *lb) {
    for (int j = 0; j < n; j++) {
        const dt__meta *m = ms[j];
        p->in[j] = m;
        int nletters = terms[j].n - terms[j].ell;
        if (terms[j].ell) {
            if (nletters > m->ndim)
                return dt__error(
                    DT_EOP,
                    "einsum(): the number of subscripts in the equation (%d) is more than the number of "
                    "dimensions (%d) for operand %d",
                    nletters, m->ndim, j);
            lb->ell_dims[j] = m->ndim - nletters;
        } else if (nletters != m->ndim) {
            return dt__error(
                DT_EOP,
                "einsum(): the number of subscripts in the equation (%d) does not match the number of "
                "dimensions (%d) for operand %d and no ellipsis was given",
                nletters, m->ndim, j);
        }
        if (lb->ell_dims[j] > lb->nell)
            lb->nell = lb->ell_dims[j];
    }
    for (int i = 0; i < lb->nell; i++) {
        lb->ell[i] = p->nlab;
        p->lsize[p->nlab] = 1;
        p->opos[p->nlab] = -1;
        p->nlab++;
    }
    return DT_OK;
}

/* Labels every dim of every operand (p->lab), making a label for each new
 * letter and unifying the sizes of a label's occurrences. */
static dt_status label_operands(dt__lplan *p, int n, const dt__meta *const *ms, const term *terms,
                                labels *lb) {
    for (int j = 0; j < n; j++) {
        const dt__meta *m = ms[j];
        int d = 0;
        for (int t = 0; t < terms[j].n; t++) {
            int li = terms[j].sym[t];
            if (li < 0) {
                for (int e = 0; e < lb->ell_dims[j]; e++, d++) {
                    int l = lb->ell[lb->nell - lb->ell_dims[j] + e];
                    if (unify(p, l, m->shape[d], 0, j) != DT_OK)
                        return DT_ESHAPE;
                    p->lab[j][d] = l;
                }
                continue;
            }
            lb->count[li]++;
            if (lb->of_letter[li] < 0) {
                lb->of_letter[li] = p->nlab;
                p->lsize[p->nlab] = m->shape[d];
                p->opos[p->nlab] = -1;
                p->nlab++;
            } else {
                /* A letter repeated in one operand takes its diagonal: the
                 * sizes must be equal there. */
                for (int t2 = 0; t2 < d; t2++)
                    if (p->lab[j][t2] == lb->of_letter[li] && m->shape[t2] != m->shape[d])
                        return dt__error(
                            DT_ESHAPE,
                            "einsum(): subscript %c is repeated for operand %d but the sizes don't "
                            "match, %lld != %lld",
                            index_letter(li), j, (long long)m->shape[t2], (long long)m->shape[d]);
                if (unify(p, lb->of_letter[li], m->shape[d], index_letter(li), j) != DT_OK)
                    return DT_ESHAPE;
            }
            p->lab[j][d++] = lb->of_letter[li];
        }
    }
    return DT_OK;
}

/* Appends label l to the output's. */
static dt_status output_label(dt__lplan *p, int l) {
    if (p->nout >= DT_MAX_NDIM)
        return dt__error(DT_EUNSUPPORTED, "einsum(): the output has more than %d dims", DT_MAX_NDIM);
    p->olab[p->nout++] = l;
    return DT_OK;
}

/* The output labels of an explicit output term [s, end) (at index pos0). */
static dt_status explicit_output(dt__lplan *p, const char *s, const char *end, int pos0, const labels *lb) {
    term out;
    if (parse_term(s, end, pos0, -1, &out) != DT_OK)
        return dt_last_status();
    int seen[52] = {0};
    for (int t = 0; t < out.n; t++) {
        int li = out.sym[t];
        if (li < 0) {
            for (int e = 0; e < lb->nell; e++)
                if (output_label(p, lb->ell[e]) != DT_OK)
                    return DT_EUNSUPPORTED;
            continue;
        }
        if (lb->of_letter[li] < 0)
            return dt__error(
                DT_EOP, "einsum(): output subscript %c does not appear in the equation for any input operand",
                index_letter(li));
        if (seen[li]++)
            return dt__error(DT_EOP, "einsum(): output subscript %c appears more than once in the output",
                             index_letter(li));
        if (output_label(p, lb->of_letter[li]) != DT_OK)
            return DT_EUNSUPPORTED;
    }
    return DT_OK;
}

/* torch's implicit output: the ellipsis dims, then the letters seen once in
 * ASCII order. */
static dt_status implicit_output(dt__lplan *p, const labels *lb) {
    for (int e = 0; e < lb->nell; e++)
        p->olab[p->nout++] = lb->ell[e];
    for (int li = 0; li < 52; li++)
        if (lb->count[li] == 1 && output_label(p, lb->of_letter[li]) != DT_OK)
            return DT_EUNSUPPORTED;
    return DT_OK;
}

dt_status dt__einsum_plan(const char *equation, int n, const dt__meta *const *ms, dt__lplan *p) {
    char eq[MAX_EQ];
    size_t len;
    if (strip_spaces(equation, eq, &len) != DT_OK)
        return DT_EINVAL;
    const char *arrow = strstr(eq, "->");
    term terms[2];
    if (parse_operands(eq, arrow ? arrow : eq + len, n, terms) != DT_OK)
        return dt_last_status();
    memset(p, 0, sizeof *p);
    p->nops = n;
    labels lb = {.nell = 0};
    for (int i = 0; i < 52; i++)
        lb.of_letter[i] = -1;
    if (ellipsis_labels(p, n, ms, terms, &lb) != DT_OK || label_operands(p, n, ms, terms, &lb) != DT_OK)
        return dt_last_status();
    dt_status st =
        arrow ? explicit_output(p, arrow + 2, eq + len, (int)(arrow + 2 - eq), &lb) : implicit_output(p, &lb);
    if (st != DT_OK)
        return st;
    for (int i = 0; i < p->nout; i++)
        p->opos[p->olab[i]] = i;
    return DT_OK;
}
