/*
 * dtorch._C: the module state (its objects, their traversal and clearing,
 * _register, by which the Python package puts its classes into it) and the
 * multi-phase initialisation that creates the types and the exception types
 * and calls each file's dtpy_add_*_methods. This file calls the others and
 * no function here is called from them: they reach the state through
 * dtorch_py.h's inline accessors (dtpy_state_of, dtpy_find_state), which
 * read dtpy_module_def and dtpy_fast_state, defined here. The status-to-
 * exception map that every file calls is errors.c, as _sqlite's util.c.
 *
 * Every function runs on a Python thread holding the GIL.
 */
#include "dtorch_py.h"

/* ---------------------------------------------------------------- state */

PyTypeObject *dtpy_fast_tensor_cls;
dtpy_state *dtpy_fast_state;

/* Frees the tensor objects kept for reuse (tensorobject.c). */
static void free_kept_tensors(dtpy_state *st) {
    while (st->n_free_tensors > 0)
        PyObject_GC_Del(st->free_tensors[--st->n_free_tensors]);
}

/* _register(tensor_cls, tensor_future_cls, sync_future_cls, mesh_from_handle,
 *           shard_cls, replicate, partial, package_dir) */
static PyObject *mod_register(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    dtpy_state *st = dtpy_state_of(module);
    if (dtpy_nargs(nargs, 8, 8, "_register") < 0)
        return NULL;
    if (!PyType_Check(args[0]) || !PyType_IsSubtype((PyTypeObject *)args[0], st->tensor_base_type))
        return PyErr_Format(PyExc_TypeError, "the tensor class must subclass _C.TensorBase");
    for (int i = 1; i <= 2; i++)
        if (!PyType_Check(args[i]) || !PyType_IsSubtype((PyTypeObject *)args[i], st->future_base_type))
            return PyErr_Format(PyExc_TypeError, "future classes must subclass _C.FutureBase");
    if (!PyUnicode_Check(args[7]))
        return PyErr_Format(PyExc_TypeError, "package_dir must be a str");
    Py_XSETREF(st->tensor_cls, (PyTypeObject *)Py_NewRef(args[0]));
    dtpy_fast_tensor_cls = st->tensor_cls;
    dtpy_fast_state = st;
    free_kept_tensors(st);
    /* Objects are reused only when the registered class adds no instance
     * fields (no __dict__, no slots): then zeroing the base's fields resets
     * an object completely. */
    st->reuse_ok = st->tensor_cls->tp_basicsize == st->tensor_base_type->tp_basicsize &&
                   st->tensor_cls->tp_itemsize == 0 && st->tensor_cls->tp_dictoffset == 0 &&
                   st->tensor_cls->tp_weaklistoffset == st->tensor_base_type->tp_weaklistoffset &&
                   st->tensor_cls->tp_finalize == NULL;
    Py_XSETREF(st->tensor_future_cls, (PyTypeObject *)Py_NewRef(args[1]));
    Py_XSETREF(st->sync_future_cls, (PyTypeObject *)Py_NewRef(args[2]));
    Py_XSETREF(st->mesh_from_handle, Py_NewRef(args[3]));
    Py_XSETREF(st->shard_cls, Py_NewRef(args[4]));
    Py_XSETREF(st->replicate_obj, Py_NewRef(args[5]));
    Py_XSETREF(st->partial_obj, Py_NewRef(args[6]));
    Py_XSETREF(st->package_dir, Py_NewRef(args[7]));
    Py_CLEAR(st->last_pkg_file);
    Py_CLEAR(st->last_user_file);
    st->last_user_utf8 = NULL;
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"_register", (PyCFunction)(void (*)(void))mod_register, METH_FASTCALL,
     "Registers the Python classes of the dtorch package."},
    {NULL, NULL, 0, NULL},
};

/* ---------------------------------------------------------------- init */

static int add_type(PyObject *module, PyType_Spec *spec, PyTypeObject **out) {
    PyObject *tp = PyType_FromModuleAndSpec(module, spec, NULL);
    if (tp == NULL)
        return -1;
    *out = (PyTypeObject *)tp;
    return PyModule_AddType(module, (PyTypeObject *)tp);
}

static int import_torch(dtpy_state *st) {
    PyObject *torch = PyImport_ImportModule("torch");
    if (torch == NULL)
        return -1;
    int rc = -1;
    PyObject *dlpack = NULL;
    for (int i = 0; i < DT_DTYPE_COUNT; i++) {
        st->torch_dtypes[i] = PyObject_GetAttrString(torch, dtpy_dtype_torch_name((dt_dtype)i));
        if (st->torch_dtypes[i] == NULL)
            goto done;
    }
    if (!(st->torch_size_type = PyObject_GetAttrString(torch, "Size")) ||
        !(st->torch_tensor_type = PyObject_GetAttrString(torch, "Tensor")) ||
        !(st->torch_device_type = PyObject_GetAttrString(torch, "device")) ||
        !(st->torch_empty = PyObject_GetAttrString(torch, "empty")) ||
        !(st->torch_get_default_dtype = PyObject_GetAttrString(torch, "get_default_dtype")))
        goto done;
    st->torch_device_cpu = PyObject_CallFunction(st->torch_device_type, "s", "cpu");
    if (st->torch_device_cpu == NULL)
        goto done;
    dlpack = PyImport_ImportModule("torch.utils.dlpack");
    if (dlpack == NULL)
        goto done;
    if (!(st->from_dlpack = PyObject_GetAttrString(dlpack, "from_dlpack")) ||
        !(st->to_dlpack = PyObject_GetAttrString(dlpack, "to_dlpack")))
        goto done;
    rc = 0;
done:
    Py_XDECREF(dlpack);
    Py_DECREF(torch);
    return rc;
}

static int module_exec(PyObject *module) {
    dtpy_state *st = dtpy_state_of(module);
    if (dtpy_tensor_methods_init() < 0 || add_type(module, &dtpy_tensor_spec, &st->tensor_base_type) < 0 ||
        add_type(module, &dtpy_mesh_spec, &st->mesh_type) < 0 ||
        add_type(module, &dtpy_graph_spec, &st->graph_base_type) < 0 ||
        add_type(module, &dtpy_future_spec, &st->future_base_type) < 0)
        return -1;
    st->placement_error = PyErr_NewExceptionWithDoc(
        "dtorch.PlacementError",
        "An operator cannot take its inputs' placements; the message names the op, the placements "
        "given, the accepted ones and the redistribute() that fixes it.",
        PyExc_ValueError, NULL);
    if (st->placement_error == NULL ||
        PyModule_AddObjectRef(module, "PlacementError", st->placement_error) < 0)
        return -1;
    st->kernel_error = PyErr_NewExceptionWithDoc(
        "dtorch.KernelError",
        "A kernel failed on a device; raised at the next value read of an affected tensor.",
        PyExc_RuntimeError, NULL);
    if (st->kernel_error == NULL || PyModule_AddObjectRef(module, "KernelError", st->kernel_error) < 0)
        return -1;
    st->tensor_cls = (PyTypeObject *)Py_NewRef(st->tensor_base_type);
    st->tensor_future_cls = (PyTypeObject *)Py_NewRef(st->future_base_type);
    st->sync_future_cls = (PyTypeObject *)Py_NewRef(st->future_base_type);
    if (!(st->str_handle = PyUnicode_InternFromString("_handle")) ||
        !(st->str_dtype = PyUnicode_InternFromString("dtype")) ||
        !(st->str_data_ptr = PyUnicode_InternFromString("data_ptr")))
        return -1;
    if (import_torch(st) < 0)
        return -1;
    if (dtpy_add_reduce_methods(module) < 0 || dtpy_add_linalg_methods(module) < 0 ||
        dtpy_add_views_methods(module) < 0 || dtpy_add_elementwise_methods(module) < 0 ||
        dtpy_add_nn_methods(module) < 0)
        return -1;
    if (dtpy_add_creation_methods(module) < 0 || dtpy_add_testing_methods(module) < 0 ||
        dtpy_add_record_methods(module) < 0 || dtpy_add_factory_methods(module) < 0 ||
        dtpy_add_cluster_methods(module) < 0 || dtpy_add_runtime_methods(module) < 0 ||
        dtpy_add_tensor_methods(module) < 0 || dtpy_add_user_methods(module) < 0)
        return -1;
    static const dtpy_constant constants[] = {
        {"MAX_NDIM", DT_MAX_NDIM},
        {"MAX_MESH_NDIM", DT_MAX_MESH_NDIM},
        {"PLACEMENT_REPLICATE", DT_PLACEMENT_REPLICATE},
        {"PLACEMENT_SHARD", DT_PLACEMENT_SHARD},
        {"PLACEMENT_PARTIAL", DT_PLACEMENT_PARTIAL},
        {"DEVICE_CPU", DT_DEVICE_CPU},
        {"DEVICE_CUDA", DT_DEVICE_CUDA},
    };
    if (DTPY_ADD_CONSTANTS(module, constants) < 0 ||
        PyModule_AddStringConstant(module, "__version__", dt_version()) < 0 ||
        PyModule_AddStringConstant(module, "TORCH_BUILD_VERSION", DT_TORCH_BUILD_VERSION) < 0)
        return -1;
    return 0;
}

// clang-format off
#define STATE_OBJECTS(X)                                                                                   \
    X(tensor_base_type) X(mesh_type) X(graph_base_type) X(future_base_type) X(placement_error)             \
    X(kernel_error) X(tensor_cls) X(tensor_future_cls) X(sync_future_cls) X(mesh_from_handle) X(shard_cls) \
    X(replicate_obj) X(partial_obj) X(package_dir) X(torch_size_type) X(torch_tensor_type)                 \
    X(torch_device_type) X(torch_device_cpu) X(torch_empty) X(torch_get_default_dtype) X(from_dlpack)      \
    X(to_dlpack) X(last_default_dtype) X(last_user_file) X(last_pkg_file) X(site_code) X(str_handle)       \
    X(str_dtype) X(str_data_ptr)
// clang-format on

static int module_traverse(PyObject *module, visitproc visit, void *arg) {
    dtpy_state *st = dtpy_state_of(module);
#define VISIT(f) Py_VISIT(st->f);
    STATE_OBJECTS(VISIT)
#undef VISIT
    for (int i = 0; i < DT_DTYPE_COUNT; i++)
        Py_VISIT(st->torch_dtypes[i]);
    return 0;
}

static int module_clear(PyObject *module) {
    dtpy_state *st = dtpy_state_of(module);
    if (dtpy_fast_state == st) {
        dtpy_fast_tensor_cls = NULL;
        dtpy_fast_state = NULL;
    }
    free_kept_tensors(st);
    st->reuse_ok = 0;
#define CLEAR(f) Py_CLEAR(st->f);
    STATE_OBJECTS(CLEAR)
#undef CLEAR
    for (int i = 0; i < DT_DTYPE_COUNT; i++)
        Py_CLEAR(st->torch_dtypes[i]);
    st->last_user_utf8 = NULL;
    return 0;
}

static void module_free(void *module) { module_clear((PyObject *)module); }

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
    {0, NULL},
};

PyModuleDef dtpy_module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "dtorch._C",
    .m_doc = "The C layer of dtorch: tensors, meshes, graphs and futures over libdtorch.",
    .m_size = sizeof(dtpy_state),
    .m_methods = module_methods,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC PyInit__C(void) { return PyModuleDef_Init(&dtpy_module_def); }
