/*
 * Private header of the CPython extension `dtorch._C`.
 *
 * The extension is a thin layer over include/dtorch/dtorch.h, laid out as
 * CPython's Modules/_sqlite: module.c is the module state and its
 * initialisation (it calls every other file's dtpy_add_*_methods; no file
 * calls a function of it), one file per Python type (tensorobject.c, meshobject.c,
 * graphobject.c, futureobject.c), and the files every other file uses:
 * errors.c (the status-to-exception map), args.c (argument converters,
 * dtype tables, the parsers of placements, meshes, shapes and scalars),
 * callsite.c, wait.c (the GIL-free waits) and dlpack.c (values handed to
 * torch). The Python package (python/dtorch) subclasses TensorBase,
 * GraphBase and FutureBase and registers its classes with
 * `_C._register(...)` so that every tensor the library hands out is a
 * `dtorch.Tensor`.
 *
 * All Python objects the module needs live in its module state (multi-phase
 * init, no C globals holding Python objects). A module function finds it
 * with dtpy_state_of(module), a type's method through the type's defining
 * module (dtpy_find_state).
 *
 * Threading: every function here runs on a Python thread holding the GIL.
 * Blocking waits release the GIL in a loop of timed waits that calls
 * PyErr_CheckSignals() in between, so Ctrl-C interrupts them.
 */
#ifndef DTORCH_PY_H
#define DTORCH_PY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "dtorch/dtorch.h"

/* ------------------------------------------------------------ module state */

typedef struct dtpy_state {
    /* Types defined by the extension. */
    PyTypeObject *tensor_base_type;
    PyTypeObject *mesh_type;
    PyTypeObject *graph_base_type;
    PyTypeObject *future_base_type;
    PyObject *placement_error; /* dtorch.PlacementError (ValueError) */
    PyObject *kernel_error;    /* dtorch.KernelError (RuntimeError) */

    /* Registered by the Python package (dtorch/_tensor.py); until then the
     * base types are used. */
    PyTypeObject *tensor_cls;        /* class of every tensor handed out */
    PyTypeObject *tensor_future_cls; /* class of to_torch_async() futures */
    PyTypeObject *sync_future_cls;   /* class of graph.sync_future() futures */
    PyObject *mesh_from_handle;      /* callable: Mesh handle -> DeviceMesh */
    PyObject *shard_cls;             /* Shard */
    PyObject *replicate_obj;         /* a Replicate() instance (immutable) */
    PyObject *partial_obj;           /* a Partial() instance (immutable) */
    PyObject *package_dir;           /* str, ends with the path separator */

    /* torch objects. */
    PyObject *torch_dtypes[DT_DTYPE_COUNT];
    PyObject *torch_size_type;
    PyObject *torch_tensor_type;
    PyObject *torch_device_type;
    PyObject *torch_device_cpu; /* torch.device("cpu") */
    PyObject *torch_empty;
    PyObject *torch_get_default_dtype;
    PyObject *from_dlpack;        /* torch.utils.dlpack.from_dlpack */
    PyObject *to_dlpack;          /* torch.utils.dlpack.to_dlpack */
    PyObject *last_default_dtype; /* the torch dtype last passed to dt_set_default_dtype */

    /* Call-site cache: filenames last classified as user code / package code. */
    PyObject *last_user_file;
    const char *last_user_utf8; /* borrowed from last_user_file */
    /* The last call site recorded from a user frame: a repeat (same thread,
     * code object and instruction) needs no frame walk and no C call. */
    /* Deallocated tensor objects of exactly tensor_cls kept for reuse
     * (untracked by the GC, no references held): an op's result object then
     * skips the allocator and the GC's allocation path, which cost more than
     * recording the op. Only when tensor_cls adds nothing to the base's
     * layout (reuse_ok). */
#define DTPY_FREE_TENSORS 64
    PyObject *free_tensors[DTPY_FREE_TENSORS];
    int n_free_tensors;
    int reuse_ok;
    PyObject *site_code; /* strong */
    int site_lasti;
    PyThreadState *site_tstate;
    PyObject *last_pkg_file;

    /* Interned attribute names. */
    PyObject *str_handle; /* "_handle" */
    PyObject *str_dtype;  /* "dtype" */
    PyObject *str_data_ptr;
} dtpy_state;

extern PyModuleDef dtpy_module_def;

/* The state of the extension module `module` (the `self` of a module
 * function): the one accessor every file uses, as Modules/_sqlite's
 * pysqlite_get_state. Never NULL for our module. */
static inline dtpy_state *dtpy_state_of(PyObject *module) { return (dtpy_state *)PyModule_GetState(module); }

/* The class every tensor is handed out as (dtorch.Tensor) and its module's
 * state: set when the package registers the class, cleared with the module.
 * The op paths check this pair first instead of walking the MRO. */
extern PyTypeObject *dtpy_fast_tensor_cls;
extern struct dtpy_state *dtpy_fast_state;

/* The module state of the extension that defined `tp` or one of its bases;
 * NULL (no exception set) when `tp` is not one of ours. */
static inline dtpy_state *dtpy_find_state(PyTypeObject *tp) {
    if (tp == dtpy_fast_tensor_cls)
        return dtpy_fast_state;
    PyObject *mro = tp->tp_mro;
    if (mro == NULL)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(mro);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyTypeObject *t = (PyTypeObject *)PyTuple_GET_ITEM(mro, i);
        if (!(t->tp_flags & Py_TPFLAGS_HEAPTYPE))
            continue;
        PyObject *m = ((PyHeapTypeObject *)t)->ht_module;
        if (m != NULL && PyModule_GetDef(m) == &dtpy_module_def)
            return (dtpy_state *)PyModule_GetState(m);
    }
    return NULL;
}

/* Like dtpy_find_state, but raises TypeError when not found. */
static inline dtpy_state *dtpy_state_of_type(PyTypeObject *tp) {
    dtpy_state *st = dtpy_find_state(tp);
    if (st == NULL)
        PyErr_Format(PyExc_TypeError, "'%s' is not a dtorch._C type", tp->tp_name);
    return st;
}

/* ------------------------------------------------------------------ types */

typedef struct dtpy_tensor {
    PyObject_HEAD dt_tensor *t; /* owned reference */
    PyObject *graph;            /* the dtorch.Graph the tensor belongs to (strong) */
    PyObject *mesh;             /* cached DeviceMesh (strong) or NULL until asked for */
    PyObject *weakreflist;
} dtpy_tensor;

typedef struct dtpy_mesh {
    PyObject_HEAD dt_mesh *m; /* owned reference */
} dtpy_mesh;

typedef struct dtpy_graph {
    PyObject_HEAD dt_graph *g; /* owned reference; NULL only before construction finished */
} dtpy_graph;

enum { DTPY_FUTURE_FETCH = 0, DTPY_FUTURE_SYNC = 1 };

typedef struct dtpy_future {
    PyObject_HEAD dt_future *f; /* owned reference */
    int kind;                   /* DTPY_FUTURE_* */
    dt_dtype dtype;             /* of the fetched tensor */
    int ndim;
    int64_t shape[DT_MAX_NDIM];
    PyObject *graph;  /* keeps the Python graph alive while the future is */
    PyObject *result; /* cached value once got (NULL before) */
} dtpy_future;

/* One spec per type file; module.c creates the types from them. */
extern PyType_Spec dtpy_tensor_spec; /* tensorobject.c */
extern PyType_Spec dtpy_mesh_spec;   /* meshobject.c */
extern PyType_Spec dtpy_graph_spec;  /* graphobject.c */
extern PyType_Spec dtpy_future_spec; /* futureobject.c */

/* The spec of the heap type dtorch._C.<NAME>, whose instances are a C
 * `ctype`, with `tpflags` besides Py_TPFLAGS_DEFAULT. */
#define DTPY_TYPE_SPEC(NAME, ctype, tpflags, slot_array)                                                     \
    {                                                                                                        \
        .name = "dtorch._C." NAME, .basicsize = sizeof(ctype), .flags = Py_TPFLAGS_DEFAULT | (tpflags),      \
        .slots = (slot_array),                                                                               \
    }

/* The slots of a handle type (Mesh, GraphBase): a docstring, a constructor,
 * a destructor that releases the handle, methods and getters; ends the
 * slot array. */
// clang-format off
#define DTPY_HANDLE_SLOTS(doc, new_fn, dealloc_fn, methods, getset)                                          \
    {Py_tp_doc, doc}, {Py_tp_new, new_fn}, {Py_tp_dealloc, dealloc_fn}, {Py_tp_methods, methods},            \
    {Py_tp_getset, getset}, {0, NULL}
// clang-format on

/* The end of a heap type's tp_dealloc: frees `self` and drops the reference
 * every instance of a heap type holds on its type. */
static inline void dtpy_free_object(PyObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    tp->tp_free(self);
    Py_DECREF(tp);
}

#define DTPY_IS_TENSOR(st, o)                                                                                \
    (Py_IS_TYPE((o), (st)->tensor_cls) || PyObject_TypeCheck((o), (st)->tensor_base_type))

/* ------------------------------------------------------- errors (errors.c) */

/* Raises the Python exception for `status` with dt_last_error() as the
 * message. Always returns NULL. */
PyObject *dtpy_raise(dtpy_state *st, dt_status status);
/* Raises for the calling thread's last failed dtorch call. Returns NULL. */
PyObject *dtpy_raise_last(dtpy_state *st);

/* -------------------------------------------------- tensors (tensorobject.c) */

/* Wraps a new dtorch tensor reference `t` (stolen; NULL means the call that
 * produced it failed and raises) into an instance of the registered tensor
 * class. `graph` is the owning Python graph; `mesh_hint` (may be NULL) is a
 * DeviceMesh reused when it describes t's mesh (pointer `hint_ptr`). */
PyObject *dtpy_tensor_wrap(dtpy_state *st, dt_tensor *t, PyObject *graph, PyObject *mesh_hint,
                           dt_mesh *hint_ptr);
/* Wraps the new reference t (NULL: raise the library error) as a Python
 * tensor on `like`'s graph and mesh. */
PyObject *dtpy_tensor_wrap_like(dtpy_state *st, dt_tensor *t, dtpy_tensor *like);
/* (values, indices) as a tuple of Python tensors like `like`; steals both
 * references (NULL only when the call failed, which raises). */
PyObject *dtpy_tensor_pair(dtpy_state *st, dtpy_tensor *like, dt_tensor *v, dt_tensor *i);
/* Points the Python tensor `self` at the value of `t` (a reference it
 * steals). dtorch values are immutable, so in-place ops, assignments and
 * inplace=True forms rebind the object instead: every Python reference to it
 * sees the new value. */
void dtpy_tensor_rebind(dtpy_tensor *self, dt_tensor *t);
/* Joins tensorobject.c's rows and dtpy_ew_methods into the one table
 * dtpy_tensor_spec is created with; call before creating the type. 0 or -1
 * with an exception (a name defined twice). */
int dtpy_tensor_methods_init(void);

/* ------------------------------------------- meshes, futures (*object.c) */

/* A new _C.Mesh handle on `m` (retained). */
PyObject *dtpy_mesh_handle_new(dtpy_state *st, dt_mesh *m);
/* Creates a future object of `cls` owning `f` (stolen). */
PyObject *dtpy_future_new(dtpy_state *st, PyTypeObject *cls, dt_future *f, int kind, PyObject *graph);
/* Waits for a fetch future and returns its value as a torch.Tensor (new
 * reference; cached on the object). */
PyObject *dtpy_future_value(dtpy_state *st, dtpy_future *fu);

/* ------------------------------------------------ waits and values (wait.c, dlpack.c) */

/* Waits for `f` with the GIL released, polling for signals. 0 or -1. */
int dtpy_wait_future(dtpy_state *st, dt_future *f);
/* Waits up to `timeout_ms` (< 0: no limit); 1 ready, 0 timed out, -1 with an
 * exception (a failure, or a signal handler raised). */
int dtpy_wait_for(dtpy_state *st, dt_future *f, long long timeout_ms);
/* After an op: waits, GIL released and Ctrl-C checked between slices, when
 * the op found its graph's pipeline over its bound (deferred backpressure).
 * 0 when done, -1 with an exception set. Cheap when there is nothing. */
int dtpy_wait_capacity_slow(void);
/* dt_graph_cancel in slices for up to `timeout` seconds (< 0: no limit): 1
 * once the graph's threads have stopped, 0 timed out, -1 with an exception. */
int dtpy_wait_cancel(dtpy_state *st, dt_graph *g, double timeout);
/* Reads the value of a fetch future `f` of the given dtype and shape as a
 * torch.Tensor (new reference), waiting with the GIL released. */
PyObject *dtpy_read_value(dtpy_state *st, dt_future *f, dt_dtype dtype, int ndim, const int64_t *shape);

/* ------------------------------------------------------------ dtypes (args.c) */

/* The dt_dtype of a torch.dtype, or -1 with TypeError set. */
int dtpy_dtype_from_torch(dtpy_state *st, PyObject *dtype);
/* Borrowed torch.dtype for a dt_dtype. */
PyObject *dtpy_dtype_to_torch(dtpy_state *st, dt_dtype dtype);
/* torch's attribute name of a dt_dtype ("float32"), or NULL. */
const char *dtpy_dtype_torch_name(dt_dtype dtype);
/* Makes dtorch's promotion dtype follow torch.get_default_dtype(). Cheap
 * when unchanged. Returns -1 with an exception set on failure. */
int dtpy_sync_default_dtype(dtpy_state *st);

/* ---------------------------------------------- argument converters (args.c) */

/* The converters every file uses for its arguments. Each returns 0 (or a
 * count) with the value in *out, or -1 with a torch-style
 * TypeError/ValueError naming `op` (the function the user called) and
 * `what` (the argument). */

/* A dtorch tensor (borrowed); None gives *out = NULL when `optional`. */
int dtpy_tensor_arg(dtpy_state *st, PyObject *o, const char *op, const char *what, int optional,
                    dtpy_tensor **out);
/* dtpy_tensor_arg for a required tensor, returning it or NULL. */
dtpy_tensor *dtpy_tensor_arg_or_null(dtpy_state *st, PyObject *o, const char *op, const char *what);
/* An int (or an __index__ integer; not bool or float). */
int dtpy_int_arg(PyObject *o, const char *op, const char *what, int64_t *out);
/* A sequence of at most `cap` ints; returns their count. */
int dtpy_ints_arg(PyObject *o, const char *op, const char *what, int64_t *out, int cap);
/* A Python number as a double; None gives NAN when `optional`. */
int dtpy_float_arg(PyObject *o, const char *op, const char *what, int optional, double *out);
/* A reduction's dim: None -> -1 (every dim), an int -> 1, a tuple/list of
 * ints -> its length; -2 with an exception set. */
int dtpy_dims_arg(PyObject *obj, const char *op, int64_t *dims);
/* A torch.dtype as a dt_dtype in *out; None gives -1 when `optional`. */
int dtpy_dtype_arg(dtpy_state *st, PyObject *o, int optional, int *out);
/* The dt_graph of a GraphBase (borrowed), or NULL with TypeError. */
dt_graph *dtpy_graph_arg(dtpy_state *st, PyObject *o);
/* 0 when the tensors belong to one graph, else -1 with ValueError naming
 * `op`. */
int dtpy_same_graph(dt_tensor *a, dt_tensor *b, const char *op);

/* The normal forms the Python package passes. */

/* Parses None or a sequence of (kind, dim) pairs into `out` (mesh ndim
 * entries). Sets *is_null when None. Returns -1 with an exception set. */
int dtpy_parse_placements(PyObject *obj, int mesh_ndim, dt_placement *out, int *is_null);
/* Parses a Python bool/int/float into a dt_scalar: 1 on success, 0 when `o`
 * is not such a scalar (no exception), -1 with an exception set. */
int dtpy_parse_scalar(PyObject *o, dt_scalar *out);
/* Extracts the dt_mesh of a DeviceMesh (its `_handle`) or of a Mesh handle.
 * Borrowed; NULL with TypeError set. */
dt_mesh *dtpy_mesh_of(dtpy_state *st, PyObject *mesh_obj);
/* Parses an int or a sequence of ints into a shape. Returns ndim or -1. */
int dtpy_parse_shape(PyObject *obj, int64_t *shape, const char *what);
/* A shape as a tuple of ints (new reference), or NULL. */
PyObject *dtpy_shape_tuple(int ndim, const int64_t *shape);

/* The positional `_C._x` functions check their argument count with one
 * message: 0 when lo <= nargs <= hi, else -1 with "_C.<name> takes N
 * arguments (M given)". */
int dtpy_nargs(Py_ssize_t nargs, Py_ssize_t lo, Py_ssize_t hi, const char *name);
/* dtpy_nargs for exactly `n` arguments, in a function whose argument count
 * is `nargs` and which returns a PyObject *. */
#define DTPY_NARGS(n, name)                                                                                  \
    do {                                                                                                     \
        if (dtpy_nargs(nargs, (n), (n), (name)) < 0)                                                         \
            return NULL;                                                                                     \
    } while (0)

/* An enum value Python uses, exported as the module constant `name` (the
 * way BINARY_ADD is): Python takes the values from _C, never copies them. */
typedef struct dtpy_constant {
    const char *name;
    long value;
} dtpy_constant;
/* Adds the n constants c[] to the module. 0 or -1 with an exception. */
int dtpy_add_constants(PyObject *module, const dtpy_constant *c, size_t n);
#define DTPY_ADD_CONSTANTS(module, table)                                                                    \
    dtpy_add_constants((module), (table), sizeof(table) / sizeof *(table))

/* ------------------------------------------------------ call sites (callsite.c) */

/* Records the innermost Python frame outside the dtorch package as the call
 * site of the calling thread's next ops (dt_set_call_site). Never fails. */
void dtpy_record_call_site(dtpy_state *st);

/* ---------------------------------------------------- the elementwise slots */

/* ops_elementwise.c: the elementwise family's rows of TensorBase's method
 * table (NULL-ended) and the slots tensorobject.c's spec points at. In-place
 * slots rebind the object to the new value and return it. */
extern PyMethodDef dtpy_ew_methods[];
PyObject *dtpy_ew_add(PyObject *a, PyObject *b);
PyObject *dtpy_ew_sub(PyObject *a, PyObject *b);
PyObject *dtpy_ew_mul(PyObject *a, PyObject *b);
PyObject *dtpy_ew_truediv(PyObject *a, PyObject *b);
PyObject *dtpy_ew_negative(PyObject *self);
PyObject *dtpy_ew_floor_divide(PyObject *a, PyObject *b);
PyObject *dtpy_ew_remainder(PyObject *a, PyObject *b);
PyObject *dtpy_ew_power(PyObject *a, PyObject *b, PyObject *mod);
PyObject *dtpy_ew_and(PyObject *a, PyObject *b);
PyObject *dtpy_ew_or(PyObject *a, PyObject *b);
PyObject *dtpy_ew_xor(PyObject *a, PyObject *b);
PyObject *dtpy_ew_iadd(PyObject *a, PyObject *b);
PyObject *dtpy_ew_isub(PyObject *a, PyObject *b);
PyObject *dtpy_ew_imul(PyObject *a, PyObject *b);
PyObject *dtpy_ew_itruediv(PyObject *a, PyObject *b);
PyObject *dtpy_ew_ifloordiv(PyObject *a, PyObject *b);
PyObject *dtpy_ew_iremainder(PyObject *a, PyObject *b);
PyObject *dtpy_ew_ipower(PyObject *a, PyObject *b, PyObject *mod);
PyObject *dtpy_ew_iand(PyObject *a, PyObject *b);
PyObject *dtpy_ew_ior(PyObject *a, PyObject *b);
PyObject *dtpy_ew_ixor(PyObject *a, PyObject *b);
PyObject *dtpy_ew_absolute(PyObject *self);
PyObject *dtpy_ew_invert(PyObject *self);
PyObject *dtpy_ew_positive(PyObject *self);
PyObject *dtpy_ew_richcompare(PyObject *self, PyObject *other, int op);
Py_hash_t dtpy_ew_hash(PyObject *self);

/* ------------------------------------------------------ module functions */

/* Each file adds its _C functions and constants to the module during
 * module.c's module_exec. 0 or -1 with an exception set. */
int dtpy_add_elementwise_methods(PyObject *module); /* ops_elementwise.c: ew_binary, ew_where, BINARY_* */
int dtpy_add_reduce_methods(PyObject *module);      /* ops_reduce.c: _reduce*, REDUCE_* */
int dtpy_add_linalg_methods(PyObject *module);      /* ops_linalg.c: _linalg, _linear, _einsum */
int dtpy_add_views_methods(PyObject *module);       /* ops_views.c: _v_* */
int dtpy_add_nn_methods(PyObject *module); /* ops_nn.c: _nn_*, ACTIVATION_*, INTERP_*, PAD_*, CONV_PAD_* */
int dtpy_add_creation_methods(PyObject *module); /* ops_creation.c: _randint, _cumsum, _sort, ... */
int dtpy_add_factory_methods(PyObject *module);  /* factories.c: full, empty, rand, ..., from_torch */
int dtpy_add_record_methods(PyObject *module);   /* recordmodule.c: explain and trace records, RECORD_* */
int dtpy_add_cluster_methods(PyObject *module);  /* clustermodule.c: MainNode's _cluster_* */
int dtpy_add_testing_methods(PyObject *module);  /* testing.c: _test_gate*, _graph_stats, ... */
int dtpy_add_runtime_methods(PyObject *module);  /* runtime.c: manual_seed, op_docs, _rebind, ... */
int dtpy_add_tensor_methods(PyObject *module);   /* tensorobject.c: METHOD_NAMES */
int dtpy_add_user_methods(PyObject *module);     /* ops_user.c: _user_op */

#endif /* DTORCH_PY_H */
