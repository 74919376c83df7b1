package ext

import (
	"encoding/json"
	"maps"
	"time"

	"github.com/agenthost/agenthost/ext/internal/extpb"
)

// Conversions between the Go contract and the wire. Each is pure and
// nil-safe (nil in, nil out) and named after its target; raw JSON is carried
// as bytes, never decoded.

func descriptorToProto(in *Descriptor) *extpb.Descriptor {
	if in == nil {
		return nil
	}
	out := &extpb.Descriptor{
		Name:            in.Name,
		Version:         in.Version,
		Description:     in.Description,
		ProtocolVersion: uint32(in.ProtocolVersion),
	}
	for _, c := range in.Capabilities {
		out.Capabilities = append(out.Capabilities, string(c))
	}
	for _, s := range in.Settings {
		out.Settings = append(out.Settings, &extpb.SettingsSection{
			Id: s.ID, Title: s.Title, Description: s.Description, Scope: s.Scope, Form: s.Form,
		})
	}
	return out
}

func descriptorFromProto(in *extpb.Descriptor) *Descriptor {
	if in == nil {
		return nil
	}
	out := &Descriptor{
		Name:            in.GetName(),
		Version:         in.GetVersion(),
		Description:     in.GetDescription(),
		ProtocolVersion: int(in.GetProtocolVersion()),
	}
	for _, c := range in.GetCapabilities() {
		out.Capabilities = append(out.Capabilities, Capability(c))
	}
	for _, s := range in.GetSettings() {
		out.Settings = append(out.Settings, SettingsSection{
			ID: s.GetId(), Title: s.GetTitle(), Description: s.GetDescription(), Scope: s.GetScope(),
			Form: raw(s.GetForm()),
		})
	}
	return out
}

var exposureToProto = map[Exposure]extpb.Exposure{
	"":               extpb.Exposure_EXPOSURE_UNSPECIFIED,
	ExposureDirect:   extpb.Exposure_EXPOSURE_DIRECT,
	ExposureDeferred: extpb.Exposure_EXPOSURE_DEFERRED,
	ExposureCodemode: extpb.Exposure_EXPOSURE_CODEMODE,
}

var replayToProto = map[Replay]extpb.Replay{
	"":           extpb.Replay_REPLAY_UNSPECIFIED,
	ReplaySafe:   extpb.Replay_REPLAY_SAFE,
	ReplayUnsafe: extpb.Replay_REPLAY_UNSAFE,
}

var pinToProto = map[PinMode]extpb.PinMode{
	"":       extpb.PinMode_PIN_MODE_UNSPECIFIED,
	PinOff:   extpb.PinMode_PIN_MODE_OFF,
	PinWarn:  extpb.PinMode_PIN_MODE_WARN,
	PinBlock: extpb.PinMode_PIN_MODE_BLOCK,
}

func toolToProto(in *Tool) *extpb.Tool {
	if in == nil {
		return nil
	}
	exp, ok := exposureToProto[in.Exposure]
	if !ok {
		// Unknown exposures are refused by the host's registry; send the
		// safest reading rather than lose the tool silently.
		exp = extpb.Exposure_EXPOSURE_CODEMODE
	}
	rep, ok := replayToProto[in.Replay]
	if !ok {
		rep = extpb.Replay_REPLAY_UNSAFE
	}
	pin, ok := pinToProto[in.Pin]
	if !ok {
		// Unknown modes are refused by the host's registry; send the
		// strictest reading rather than lose the pin silently.
		pin = extpb.PinMode_PIN_MODE_BLOCK
	}
	return &extpb.Tool{
		Name: in.Name, Title: in.Title, Description: in.Description,
		InputSchema: in.InputSchema, OutputSchema: in.OutputSchema, Annotations: in.Annotations,
		Exposure: exp, Replay: rep, Execution: in.Execution, Icons: in.Icons, Meta: in.Meta,
		Pin: pin, PinByOperator: in.PinByOperator,
	}
}

func toolFromProto(in *extpb.Tool) *Tool {
	if in == nil {
		return nil
	}
	out := &Tool{
		Name: in.GetName(), Title: in.GetTitle(), Description: in.GetDescription(),
		InputSchema: raw(in.GetInputSchema()), OutputSchema: raw(in.GetOutputSchema()),
		Annotations: raw(in.GetAnnotations()), Execution: raw(in.GetExecution()), Icons: raw(in.GetIcons()),
		Meta: raw(in.GetMeta()), PinByOperator: in.GetPinByOperator(),
	}
	for k, v := range pinToProto {
		if v == in.GetPin() {
			out.Pin = k
		}
	}
	for k, v := range exposureToProto {
		if v == in.GetExposure() {
			out.Exposure = k
		}
	}
	for k, v := range replayToProto {
		if v == in.GetReplay() {
			out.Replay = k
		}
	}
	return out
}

func toolsToProto(in []Tool) []*extpb.Tool {
	if in == nil {
		return nil
	}
	out := make([]*extpb.Tool, len(in))
	for i := range in {
		out[i] = toolToProto(&in[i])
	}
	return out
}

func toolsFromProto(in []*extpb.Tool) []Tool {
	if in == nil {
		return nil
	}
	out := make([]Tool, 0, len(in))
	for _, t := range in {
		if t != nil {
			out = append(out, *toolFromProto(t))
		}
	}
	return out
}

func catalogToProto(user string, in *Catalog) *extpb.SetUserCatalogRequest {
	out := &extpb.SetUserCatalogRequest{UserId: user}
	if in == nil {
		return out
	}
	out.Tools = toolsToProto(in.Tools)
	for _, p := range in.Prompts {
		out.Prompts = append(out.Prompts, &extpb.Prompt{Name: p.Name, Definition: p.Definition})
	}
	for _, r := range in.Resources {
		out.Resources = append(out.Resources, &extpb.Resource{Uri: r.URI, Definition: r.Definition, Server: r.Server})
	}
	for _, t := range in.ResourceTemplates {
		out.ResourceTemplates = append(out.ResourceTemplates, &extpb.ResourceTemplate{UriTemplate: t.URITemplate, Definition: t.Definition, Server: t.Server})
	}
	for _, x := range in.Instructions {
		out.Instructions = append(out.Instructions, &extpb.Instruction{Source: x.Source, Text: x.Text})
	}
	return out
}

func catalogFromProto(in *extpb.SetUserCatalogRequest) *Catalog {
	if in == nil {
		return nil
	}
	out := &Catalog{Tools: toolsFromProto(in.GetTools())}
	for _, p := range in.GetPrompts() {
		out.Prompts = append(out.Prompts, Prompt{Name: p.GetName(), Definition: raw(p.GetDefinition())})
	}
	for _, r := range in.GetResources() {
		out.Resources = append(out.Resources, Resource{URI: r.GetUri(), Definition: raw(r.GetDefinition()), Server: r.GetServer()})
	}
	for _, t := range in.GetResourceTemplates() {
		out.ResourceTemplates = append(out.ResourceTemplates, ResourceTemplate{URITemplate: t.GetUriTemplate(), Definition: raw(t.GetDefinition()), Server: t.GetServer()})
	}
	for _, x := range in.GetInstructions() {
		out.Instructions = append(out.Instructions, Instruction{Source: x.GetSource(), Text: x.GetText()})
	}
	return out
}

func processSpecToProto(in *ProcessSpec) *extpb.ProcessSpec {
	if in == nil {
		return nil
	}
	return &extpb.ProcessSpec{
		Command: in.Command, Args: in.Args, Env: in.Env, Dir: in.Dir, ReadablePaths: in.ReadablePaths,
		OneSession: in.OneSession, Sandbox: in.Sandbox,
	}
}

func processSpecFromProto(in *extpb.ProcessSpec) *ProcessSpec {
	if in == nil {
		return nil
	}
	return &ProcessSpec{
		Command: in.GetCommand(), Args: in.GetArgs(), Env: in.GetEnv(), Dir: in.GetDir(),
		ReadablePaths: in.GetReadablePaths(), OneSession: in.GetOneSession(), Sandbox: in.GetSandbox(),
	}
}

func statusEntryToProto(in *StatusEntry) *extpb.StatusEntry {
	if in == nil {
		return nil
	}
	out := &extpb.StatusEntry{
		UserId: in.User, Name: in.Name, State: in.State, Reason: in.Reason,
		Tools: int32(in.Tools), Detail: in.Detail, Actions: in.Actions,
	}
	if !in.NextRetry.IsZero() {
		out.NextRetryUnixMs = in.NextRetry.UnixMilli()
	}
	return out
}

func statusEntryFromProto(in *extpb.StatusEntry) *StatusEntry {
	if in == nil {
		return nil
	}
	out := &StatusEntry{
		User: in.GetUserId(), Name: in.GetName(), State: in.GetState(), Reason: in.GetReason(),
		Tools: int(in.GetTools()), Detail: in.GetDetail(), Actions: in.GetActions(),
	}
	if ms := in.GetNextRetryUnixMs(); ms != 0 {
		out.NextRetry = time.UnixMilli(ms)
	}
	return out
}

// raw returns b as raw JSON, keeping nil for empty so that "absent" stays
// absent across the wire.
func raw(b []byte) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	return json.RawMessage(b)
}

func beginAuthRequestToProto(in *BeginAuthRequest) *extpb.BeginAuthRequest {
	if in == nil {
		return nil
	}
	return &extpb.BeginAuthRequest{UserId: in.User, Name: in.Name, RedirectUrl: in.RedirectURL, ClientMetadataUrl: in.ClientMetadataURL}
}

func beginAuthRequestFromProto(in *extpb.BeginAuthRequest) *BeginAuthRequest {
	if in == nil {
		return nil
	}
	return &BeginAuthRequest{User: in.GetUserId(), Name: in.GetName(), RedirectURL: in.GetRedirectUrl(), ClientMetadataURL: in.GetClientMetadataUrl()}
}

func beginAuthResultToProto(in *BeginAuthResult) *extpb.BeginAuthResponse {
	if in == nil {
		return nil
	}
	out := &extpb.BeginAuthResponse{Url: in.URL, State: in.State}
	if !in.Expires.IsZero() {
		out.ExpiresUnixMs = in.Expires.UnixMilli()
	}
	return out
}

func beginAuthResultFromProto(in *extpb.BeginAuthResponse) *BeginAuthResult {
	if in == nil {
		return nil
	}
	out := &BeginAuthResult{URL: in.GetUrl(), State: in.GetState()}
	if ms := in.GetExpiresUnixMs(); ms != 0 {
		out.Expires = time.UnixMilli(ms)
	}
	return out
}

func completeAuthRequestToProto(in *CompleteAuthRequest) *extpb.CompleteAuthRequest {
	if in == nil {
		return nil
	}
	return &extpb.CompleteAuthRequest{UserId: in.User, Name: in.Name, State: in.State, Query: in.Query}
}

func completeAuthRequestFromProto(in *extpb.CompleteAuthRequest) *CompleteAuthRequest {
	if in == nil {
		return nil
	}
	return &CompleteAuthRequest{User: in.GetUserId(), Name: in.GetName(), State: in.GetState(), Query: in.GetQuery()}
}

func completeAuthResultToProto(in *CompleteAuthResult) *extpb.CompleteAuthResponse {
	if in == nil {
		return nil
	}
	return &extpb.CompleteAuthResponse{Message: in.Message}
}

func completeAuthResultFromProto(in *extpb.CompleteAuthResponse) *CompleteAuthResult {
	if in == nil {
		return nil
	}
	return &CompleteAuthResult{Message: in.GetMessage()}
}

// snapshotToPB converts a user's snapshot; nil stays nil (none sent).
func snapshotToPB(s *UserSnapshot) *extpb.UserSnapshot {
	if s == nil {
		return nil
	}
	out := &extpb.UserSnapshot{Settings: make(map[string][]byte, len(s.Settings)), Secrets: maps.Clone(s.Secrets)}
	for k, v := range s.Settings {
		out.Settings[k] = v
	}
	return out
}

// snapshotFromPB converts a user's snapshot; an absent one is nil.
func snapshotFromPB(s *extpb.UserSnapshot) *UserSnapshot {
	if s == nil {
		return nil
	}
	out := &UserSnapshot{Settings: make(map[string]json.RawMessage, len(s.GetSettings())), Secrets: s.GetSecrets()}
	for k, v := range s.GetSettings() {
		out.Settings[k] = v
	}
	if out.Secrets == nil {
		out.Secrets = map[string]string{}
	}
	return out
}
