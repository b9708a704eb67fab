package export

// The sink types register themselves with the sink registries.
import (
	_ "kollect.dev/kollect/pkg/controllers/export/sink/file"
	_ "kollect.dev/kollect/pkg/controllers/export/sink/git"
	_ "kollect.dev/kollect/pkg/controllers/export/sink/nats"
	_ "kollect.dev/kollect/pkg/controllers/export/sink/postgres"
	_ "kollect.dev/kollect/pkg/controllers/export/sink/webhook"
)
