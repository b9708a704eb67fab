package source

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// ListWatch lists and watches one resource of the host cluster as Objects
// of a shape: the cache.ListerWatcher of an informer whose objects are
// *Object. It speaks the list and watch protocol of any API server (watch
// lists, bookmarks, paging, 410 Gone) over a client of the host's
// JSON-speaking REST configuration (dynamic.ConfigFor).
type ListWatch struct {
	client rest.Interface
	path   string
	shape  Shape
}

var _ cache.ListerWatcherWithContext = &ListWatch{}

// NewListWatch is the ListWatch of gvr in shape.Namespace ("" for all).
func NewListWatch(client rest.Interface, gvr schema.GroupVersionResource, shape Shape) *ListWatch {
	path := "/apis/" + gvr.Group + "/" + gvr.Version
	if gvr.Group == "" {
		path = "/api/" + gvr.Version
	}
	if shape.Namespace != "" {
		path += "/namespaces/" + shape.Namespace
	}
	return &ListWatch{client: client, path: path + "/" + gvr.Resource, shape: shape}
}

func (l *ListWatch) List(opts metav1.ListOptions) (runtime.Object, error) {
	return l.ListWithContext(context.Background(), opts)
}

func (l *ListWatch) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return l.WatchWithContext(context.Background(), opts)
}

// ListWithContext reads one page.
func (l *ListWatch) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	opts.Watch = false
	body, err := l.client.Get().AbsPath(l.path).SpecificallyVersionedParams(&opts, metav1.ParameterCodec, metav1.SchemeGroupVersion).DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	list, err := newDecoder(l.shape).list(body)
	if err != nil {
		return nil, fmt.Errorf("decoding the list of %s: %w", l.path, err)
	}
	return list, nil
}

// WatchWithContext watches from opts.ResourceVersion (or, with
// opts.SendInitialEvents, streams the list first).
func (l *ListWatch) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	body, err := l.client.Get().AbsPath(l.path).SpecificallyVersionedParams(&opts, metav1.ParameterCodec, metav1.SchemeGroupVersion).Stream(ctx)
	if err != nil {
		return nil, err
	}
	dec := &eventDecoder{frames: newFrameReader(body), body: body, decoder: newDecoder(l.shape)}
	return watch.NewStreamWatcher(dec, apierrors.NewClientErrorReporter(http.StatusInternalServerError, http.MethodGet, "ClientWatchDecoding")), nil
}

// eventDecoder is the watch.Decoder of a JSON watch stream.
type eventDecoder struct {
	frames  *frameReader
	body    io.Closer
	decoder *decoder
}

func (e *eventDecoder) Decode() (watch.EventType, runtime.Object, error) {
	frame, err := e.frames.next()
	if err != nil {
		return "", nil, err
	}
	return e.decoder.event(frame)
}

func (e *eventDecoder) Close() { _ = e.body.Close() }

// maxFrame bounds one watch event: far above any object etcd stores (1.5
// MiB by default), far below what would hurt the server.
const maxFrame = 64 << 20

var errFrameTooLarge = errors.New("watch event larger than 64 MiB")

// frameReader cuts a stream of JSON values (an API server's watch stream:
// one event after the other) into one value at a time. It only follows
// strings and nesting; the decoder checks the rest.
type frameReader struct {
	r   io.Reader
	buf []byte
	// buf[start:end] is read and not yet handed out.
	start, end int
}

func newFrameReader(r io.Reader) *frameReader {
	return &frameReader{r: r, buf: make([]byte, 64<<10)}
}

// next returns the next value, valid until the following call. At the end
// of the stream it returns io.EOF, or io.ErrUnexpectedEOF within a value.
func (f *frameReader) next() ([]byte, error) {
	depth, inString, escaped, begun := 0, false, false, false
	i := f.start
	for {
		for ; i < f.end; i++ {
			c := f.buf[i]
			switch {
			case inString:
				switch {
				case escaped:
					escaped = false
				case c == '\\':
					escaped = true
				case c == '"':
					inString = false
				}
				continue
			case !begun:
				if c == ' ' || c == '\t' || c == '\n' || c == '\r' {
					f.start++
					continue
				}
				if c != '{' {
					return nil, fmt.Errorf("invalid watch stream: an event starts with %q", c)
				}
				begun = true
			}
			switch c {
			case '"':
				inString = true
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					frame := f.buf[f.start : i+1]
					f.start = i + 1
					return frame, nil
				}
			}
		}
		// Need more: move what is pending to the front, grow when full.
		if f.start > 0 {
			n := copy(f.buf, f.buf[f.start:f.end])
			i -= f.start
			f.start, f.end = 0, n
		}
		if f.end == len(f.buf) {
			if len(f.buf) >= maxFrame {
				return nil, errFrameTooLarge
			}
			f.buf = append(f.buf, make([]byte, len(f.buf))...)
		}
		n, err := f.r.Read(f.buf[f.end:])
		f.end += n
		if err != nil && n == 0 {
			if err == io.EOF && (begun || f.start < f.end) {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
}
