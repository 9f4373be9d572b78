/* The native pull lane's C half: PULL_MESSAGE frame split and header parse, and the encoding
 * of the SUCCESS responses (header template + body). The broker's Python
 * (broker/processors/pull_lane.py) does everything that needs its state, per request; the
 * Python decoder and RemotingCommand encoder are the reference (tests/native/test_pull_lane.py). */
#include "sendlane.h"

/* P_BNAME, P_REQT: keys the Java client 4.9.5+ adds (RpcRequestHeader's bname, and ReqT), strings that
 * PullMessageRequestHeader.from_fields ignores, as the lane does. */
enum { P_GROUP, P_TOPIC, P_QUEUE_ID, P_QUEUE_OFFSET, P_MAX_MSG, P_SYS_FLAG, P_COMMIT, P_SUSPEND, P_SUB_VERSION, P_SUB,
       P_EXPR, P_BNAME, P_REQT, P_KEYS };

static const char *const PULL_KEYS[P_KEYS] = {
    "consumerGroup", "topic",        "queueId",    "queueOffset",  "maxMsgNums",     "sysFlag",
    "commitOffset",  "suspendTimeoutMillis", "subVersion", "subscription", "expressionType", "bname", "ReqT"};

/* A number as the Python path reads it, with an optional minus sign. */
static int signed_number(const sl_str *s, int wide, int64_t *out) {
    if (s->present && !s->escaped && s->raw_len >= 2 && s->raw[0] == '-') {
        sl_str rest = *s;
        rest.raw += 1;
        rest.raw_len -= 1;
        if (!sl_plain_number(&rest, wide, out)) return 0;
        *out = -*out;
        return 1;
    }
    return sl_plain_number(s, wide, out);
}

static PyObject *text_of(const sl_str *s) {
    if (!s->present) return Py_NewRef(Py_None);
    if (!s->escaped) return PyUnicode_DecodeUTF8((const char *)s->raw, s->raw_len, "strict");
    unsigned char *tmp = PyMem_Malloc((size_t)s->len + 1);
    if (tmp == NULL) return PyErr_NoMemory();
    sl_unescape(s, tmp);
    PyObject *text = PyUnicode_DecodeUTF8((const char *)tmp, s->len, "strict");
    PyMem_Free(tmp);
    return text;
}

/* scan_pulls(buffer, start, limit, max_frame_bytes) -> list of (frame_end, opaque, group, topic, queue_id,
 * queue_offset, max_msg_nums, sys_flag, commit_offset, suspend_timeout_millis, sub_version, subscription,
 * expression_type): the leading plain PULL_MESSAGE frames. */
PyObject *sl_scan_pulls(PyObject *module, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start, limit, max_frame;
    if (!PyArg_ParseTuple(args, "y*nnn", &view, &start, &limit, &max_frame)) return NULL;
    PyObject *items = PyList_New(0);
    if (items == NULL || start < 0 || start > view.len) {
        if (items != NULL) PyErr_SetString(PyExc_ValueError, "start is outside the buffer");
        Py_XDECREF(items);
        PyBuffer_Release(&view);
        return NULL;
    }
    Py_ssize_t pos = start;
    while (PyList_GET_SIZE(items) < limit) {
        sl_str f[P_KEYS];
        sl_command command;
        int64_t queue_id, queue_offset, max_msg, sys_flag, commit, suspend, sub_version;
        if (!sl_parse_command(view.buf, pos, view.len, max_frame, 11, PULL_KEYS, P_KEYS, f, &command)) break;
        if (!f[P_GROUP].present || !f[P_TOPIC].present || !sl_plain_number(&f[P_QUEUE_ID], 0, &queue_id) ||
            !sl_plain_number(&f[P_QUEUE_OFFSET], 1, &queue_offset) || !sl_plain_number(&f[P_MAX_MSG], 0, &max_msg) ||
            !sl_plain_number(&f[P_SYS_FLAG], 0, &sys_flag) || !signed_number(&f[P_COMMIT], 1, &commit) ||
            !sl_plain_number(&f[P_SUSPEND], 1, &suspend) || !sl_plain_number(&f[P_SUB_VERSION], 1, &sub_version) ||
            command.body_len != 0)
            break;
        PyObject *group = text_of(&f[P_GROUP]), *topic = text_of(&f[P_TOPIC]), *sub = text_of(&f[P_SUB]),
                 *expr = text_of(&f[P_EXPR]);
        PyObject *item = NULL;
        if (group != NULL && topic != NULL && sub != NULL && expr != NULL)
            item = Py_BuildValue("(niOOLLLLLLLOO)", command.frame_end, (int)command.opaque, group, topic,
                                 (long long)queue_id, (long long)queue_offset, (long long)max_msg, (long long)sys_flag,
                                 (long long)commit, (long long)suspend, (long long)sub_version, sub, expr);
        Py_XDECREF(group);
        Py_XDECREF(topic);
        Py_XDECREF(sub);
        Py_XDECREF(expr);
        if (item == NULL || PyList_Append(items, item) < 0) {
            Py_XDECREF(item);
            Py_DECREF(items);
            PyBuffer_Release(&view);
            return NULL;
        }
        Py_DECREF(item);
        pos = command.frame_end;
    }
    PyBuffer_Release(&view);
    return items;
}
