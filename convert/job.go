// Package convert writes quantized Spark checkpoints that real consumers
// load: the shared plumbing (output folder, config.json with its
// quantization_config, copied tokenizer files, sharded safetensors, the
// sparkconv-report.json, job.go), the Format interface and its one runner
// Convert (format.go), the 4-bit core (int4.go) and one file per output
// format, a Format value with its reader: compressed-tensors W8A8
// (w8a8.go), GPTQ-format W4A8 (gptq.go) and tinygemm W4A16 (w4a16.go). How
// codes are chosen is a CodeChooser: round to nearest here, the GPTQ solve
// in package gptq.
//
// A converter streams tensor by tensor: every output tensor is produced on
// demand from the memory-mapped input and released once written, so peak
// memory stays near the largest tensor, not the model.
package convert

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"

	"sparkconv/infile"
	"sparkconv/outdir"
	"sparkconv/progress"
	"sparkconv/quant"
	"sparkconv/safetensors"
	"sparkconv/spark"
)

// AuxFiles are copied unchanged from the input folder when present.
var AuxFiles = []string{
	"tokenizer.json", "tokenizer_config.json", "generation_config.json",
	"special_tokens_map.json", "chat_template.jinja", "chat_template.json",
	"tokenizer.model", "vocab.json", "merges.txt",
}

// ReportFile is the report written beside every quantized checkpoint.
const ReportFile = "sparkconv-report.json"

// Options common to every converting command.
type Options struct {
	Model        string // input folder
	Out          string // output folder
	Force        bool   // replace an existing output
	MaxShardSize int64  // bytes per shard; 0 = one file
	Quiet        bool   // no progress summary line on stderr
	Version      string // sparkconv version, recorded in config and report
	// Inputs are the other files the conversion reads (calibration
	// samples, --eval text): Out may not be, hold or lie inside one.
	Inputs []string
	// Stamps are files an earlier step read (keep-float's measurement of
	// the model): checked unchanged before the commit, as the model is.
	Stamps []infile.Stamp
}

// Job is one conversion in progress: the input model, the output folder
// being built, and the report being filled.
type Job struct {
	ctx    context.Context
	Opt    Options
	Model  *spark.Model
	Dir    *outdir.Dir
	Report *Report
	bar    *progress.Bar
	start  time.Time
	mu     sync.Mutex
	aux    []auxFile // read at Start, written by CopyAux

	scratch  []*os.File // removed before Commit (solver.go)
	solution Solution   // set by a calibrated conversion
}

type auxFile struct {
	name string
	data []byte
}

// Start opens and validates the input (including a NaN/Inf scan) and
// creates the temporary output folder. The caller must defer Close.
func Start(ctx context.Context, opt Options, scheme string) (*Job, error) {
	return start(ctx, opt, scheme, true)
}

// StartAsRead is Start without the up-front NaN/Inf scan, for a
// conversion whose every read refuses non-finite values itself: copies
// through Model.Raw, quantized tensors in the quantizer's own pass (one
// read of the weights fewer). The output is temporary until Commit, so a
// NaN found late still leaves nothing behind.
func StartAsRead(ctx context.Context, opt Options, scheme string) (*Job, error) {
	return start(ctx, opt, scheme, false)
}

// checkPaths refuses options without an input or an output folder.
func checkPaths(opt Options) error {
	if opt.Model == "" || opt.Out == "" {
		return errors.New("both --model and --out are required")
	}
	return nil
}

func start(ctx context.Context, opt Options, scheme string, scan bool) (*Job, error) {
	if err := checkPaths(opt); err != nil {
		return nil, err
	}
	m, err := spark.Open(opt.Model)
	if err != nil {
		return nil, err
	}
	if scan {
		if err := m.CheckFinite(); err != nil {
			m.Close()
			return nil, err
		}
	}
	aux, err := readAux(opt.Model)
	if err != nil {
		m.Close()
		return nil, err
	}
	d, err := outdir.Create(opt.Out, opt.Force, append([]string{opt.Model}, opt.Inputs...)...)
	if err != nil {
		m.Close()
		return nil, err
	}
	return &Job{
		ctx: ctx, Opt: opt, Model: m, Dir: d, start: time.Now(), aux: aux,
		Report: &Report{Tool: "sparkconv", Version: opt.Version, Scheme: scheme, Model: opt.Model, Tensors: []TensorReport{}},
	}, nil
}

// Close removes the temporary output unless Commit succeeded, and unmaps
// the input.
func (j *Job) Close() {
	j.removeScratch()
	j.Dir.Abort()
	j.Model.Close()
}

// readAux reads the tokenizer and generation files present in dir, once,
// when the input is opened (regular files under a size cap), so the output
// gets the files of the checkpoint that was converted even if the folder
// changes meanwhile.
func readAux(dir string) ([]auxFile, error) {
	var out []auxFile
	for _, name := range AuxFiles {
		src := filepath.Join(dir, name)
		if _, err := os.Lstat(src); err != nil {
			continue
		}
		data, err := infile.ReadFile(src, infile.TokenizerMax)
		if err != nil {
			return nil, err
		}
		out = append(out, auxFile{name, data})
	}
	return out, nil
}

// CopyAux writes the tokenizer and generation files read at Start.
func (j *Job) CopyAux() error {
	for _, a := range j.aux {
		if err := j.Dir.WriteFile(a.name, a.data); err != nil {
			return fmt.Errorf("copy %s: %w", a.name, err)
		}
	}
	return nil
}

// WriteConfig writes the input config.json (as read at Start) with the
// given keys replaced (nil deletes a key), keys sorted as transformers
// writes them.
func (j *Job) WriteConfig(set map[string]any) error {
	var cfg map[string]any
	if err := json.Unmarshal(j.Model.ConfigJSON, &cfg); err != nil {
		return fmt.Errorf("%s: %w", spark.ConfigFile, err)
	}
	for k, v := range set {
		if v == nil {
			delete(cfg, k)
		} else {
			cfg[k] = v
		}
	}
	out, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	return safetensors.WriteFileSync(j.Dir.Join(spark.ConfigFile), append(out, '\n'))
}

// Copy returns an output tensor that is the input tensor, bit for bit.
func (j *Job) Copy(name string) safetensors.Tensor {
	t, _ := j.Model.Info(name)
	return safetensors.Tensor{
		Name: name, DType: t.DType, Shape: t.Shape,
		Produce: func() ([]byte, error) {
			if err := j.ctx.Err(); err != nil {
				return nil, err
			}
			_, raw, err := j.Model.Raw(name)
			return raw, err
		},
	}
}

// WriteTensors writes the checkpoint with a progress bar over bytes and
// releases each input tensor's pages once its outputs are written. src
// maps each output tensor to the input tensor it reads.
func (j *Job) WriteTensors(tensors []safetensors.Tensor, src map[string]string) error {
	var total int64
	for _, t := range tensors {
		total += t.Bytes()
	}
	j.bar = progress.New(total, j.Report.Scheme, true)
	files, err := safetensors.WriteCheckpoint(j.Dir.Path(), tensors, safetensors.WriteOptions{
		MaxShardSize: j.Opt.MaxShardSize,
		Metadata:     map[string]string{"format": "pt"},
		Done: func(t safetensors.Tensor) {
			j.bar.Add(t.Bytes())
			if s, ok := src[t.Name]; ok {
				j.Model.Release(s)
			}
		},
	})
	if err != nil {
		return err // no "done" line for work that failed
	}
	j.bar.Done(j.Opt.Quiet)
	j.Report.Files = files
	return nil
}

// AddTensor records one tensor's result in the report (safe for
// concurrent use).
func (j *Job) AddTensor(r TensorReport) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.Report.Tensors = append(j.Report.Tensors, r)
}

// Commit writes the report, then moves the output folder into place
// (unless the job was interrupted).
func (j *Job) Commit() error {
	if err := j.ctx.Err(); err != nil {
		return err
	}
	if err := j.removeScratch(); err != nil {
		return err
	}
	if err := j.Model.Unchanged(); err != nil {
		return err
	}
	if err := infile.CheckAll(j.Opt.Stamps); err != nil {
		return err
	}
	j.Report.Totals.InBytes = j.Model.TotalBytes()
	for _, f := range j.Report.Files {
		if st, err := os.Stat(j.Dir.Join(f)); err == nil {
			j.Report.Totals.OutBytes += st.Size()
		}
	}
	j.Report.finish(time.Since(j.start))
	data, err := json.MarshalIndent(j.Report, "", "  ")
	if err != nil {
		return err
	}
	if err := safetensors.WriteFileSync(j.Dir.Join(ReportFile), append(data, '\n')); err != nil {
		return err
	}
	return j.Dir.Commit()
}

// Report is sparkconv-report.json.
type Report struct {
	Tool     string         `json:"tool"`
	Version  string         `json:"version,omitempty"`
	Scheme   string         `json:"scheme"`
	Model    string         `json:"model"`
	Method   string         `json:"method,omitempty"`
	Settings map[string]any `json:"settings,omitempty"`
	// Calibration is set by a calibrated (GPTQ) conversion.
	Calibration *Calibration   `json:"calibration,omitempty"`
	Files       []string       `json:"files"`
	Tensors     []TensorReport `json:"tensors"`
	Totals      Totals         `json:"totals"`
	Timing      Timing         `json:"timing"`
	PeakRSSMB   float64        `json:"peak_rss_mb"`
	// Eval is the build's fidelity on held-out text (eval.Result), when
	// the command was asked to measure it (--eval).
	Eval any `json:"eval,omitempty"`
	// Gate is the fidelity gate's verdict (--max-kld, --min-top1), when
	// one was set.
	Gate any `json:"gate,omitempty"`
}

// Rewrite replaces dir's sparkconv-report.json with r (outdir.File: a
// temporary file beside it, fsynced, renamed over it, and only over a
// report sparkconv wrote): how --eval adds its figures to a committed
// build.
func (r *Report) Rewrite(dir string) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	out, err := outdir.NewFile(filepath.Join(dir, ReportFile), true, outdir.SparkconvJSON)
	if err != nil {
		return err
	}
	return out.WriteBytes(append(data, '\n'))
}

// TensorReport is one quantized tensor's fidelity.
type TensorReport struct {
	Name   string  `json:"name"`
	Scheme string  `json:"scheme"`
	Shape  []int64 `json:"shape"`
	SNRdB  float64 `json:"snr_db"`
	MaxErr float64 `json:"max_abs_err"`
	// PlainSNRdB is the SNR without the scale search (4-bit schemes).
	PlainSNRdB *float64 `json:"plain_snr_db,omitempty"`
	// GPTQ is the calibration record of a calibrated conversion.
	GPTQ *ModuleReport `json:"gptq,omitempty"`
}

// MarshalJSON writes the SNRs as quant.DB (null when infinite) and adds
// "exact": true for a tensor reproduced without any error (an all-zero or
// constant tensor), whose SNR is infinite.
func (t TensorReport) MarshalJSON() ([]byte, error) {
	type plain TensorReport
	out := struct {
		plain
		SNRdB      quant.DB  `json:"snr_db"`
		PlainSNRdB *quant.DB `json:"plain_snr_db,omitempty"`
		Exact      bool      `json:"exact,omitempty"`
	}{plain: plain(t), SNRdB: quant.DB(t.SNRdB), Exact: t.MaxErr == 0}
	if t.PlainSNRdB != nil {
		p := quant.DB(*t.PlainSNRdB)
		out.PlainSNRdB = &p
	}
	return json.Marshal(out)
}

// MarshalJSON writes the held-out errors as quant.Number: null when the
// reference output is all zero (a zero weight gives a relative error 0/0).
func (m ModuleReport) MarshalJSON() ([]byte, error) {
	type plain ModuleReport
	return json.Marshal(struct {
		plain
		OutErr    quant.Number `json:"held_out_rel_err"`
		OutErrRTN quant.Number `json:"held_out_rel_err_rtn"`
	}{plain(m), quant.Number(m.OutErr), quant.Number(m.OutErrRTN)})
}

// MarshalJSON writes the SNR summaries as quant.DB (null when no tensor
// had a finite SNR).
func (t Totals) MarshalJSON() ([]byte, error) {
	type plain Totals
	return json.Marshal(struct {
		plain
		MinSNRdB       quant.DB `json:"min_snr_db"`
		MeanSNRdB      quant.DB `json:"mean_snr_db"`
		MaxSNRdB       quant.DB `json:"max_snr_db"`
		PlainMeanSNRdB quant.DB `json:"plain_mean_snr_db,omitempty"`
	}{plain(t), quant.DB(t.MinSNRdB), quant.DB(t.MeanSNRdB), quant.DB(t.MaxSNRdB), quant.DB(t.PlainMeanSNRdB)})
}

// Totals summarize the quantized tensors. The SNR figures are over the
// tensors with a finite SNR; Exact counts those reproduced exactly.
type Totals struct {
	Quantized      int     `json:"quantized_tensors"`
	Copied         int     `json:"copied_tensors"`
	InBytes        int64   `json:"input_bytes"`  // tensor data of the input checkpoint
	OutBytes       int64   `json:"output_bytes"` // size of the files listed in "files"
	MinSNRdB       float64 `json:"min_snr_db"`
	MeanSNRdB      float64 `json:"mean_snr_db"`
	MaxSNRdB       float64 `json:"max_snr_db"`
	MaxErr         float64 `json:"max_abs_err"`
	PlainMeanSNRdB float64 `json:"plain_mean_snr_db,omitempty"`
	Exact          int     `json:"exact_tensors"`
}

// Timing is wall time in seconds.
type Timing struct {
	TotalS float64 `json:"total_s"`
}

func (r *Report) finish(elapsed time.Duration) {
	sort.Slice(r.Tensors, func(a, b int) bool { return r.Tensors[a].Name < r.Tensors[b].Name })
	r.Totals.Quantized = len(r.Tensors)
	finite := func(v float64) bool { return !math.IsInf(v, 0) && !math.IsNaN(v) }
	nan := math.NaN()
	r.Totals.MinSNRdB, r.Totals.MaxSNRdB = nan, nan
	var sum, plain float64
	var n, nPlain int
	for _, t := range r.Tensors {
		r.Totals.MaxErr = max(r.Totals.MaxErr, t.MaxErr)
		if t.MaxErr == 0 {
			r.Totals.Exact++
		}
		if t.PlainSNRdB != nil && finite(*t.PlainSNRdB) {
			plain += *t.PlainSNRdB
			nPlain++
		}
		if !finite(t.SNRdB) {
			continue
		}
		if n == 0 {
			r.Totals.MinSNRdB, r.Totals.MaxSNRdB = t.SNRdB, t.SNRdB
		}
		n++
		sum += t.SNRdB
		r.Totals.MinSNRdB = min(r.Totals.MinSNRdB, t.SNRdB)
		r.Totals.MaxSNRdB = max(r.Totals.MaxSNRdB, t.SNRdB)
	}
	r.Totals.MeanSNRdB = nan
	if n > 0 {
		r.Totals.MeanSNRdB = sum / float64(n)
	}
	if nPlain > 0 {
		r.Totals.PlainMeanSNRdB = plain / float64(nPlain)
	}
	r.Timing.TotalS = elapsed.Seconds()
	r.PeakRSSMB = PeakRSSMB()
}

// PeakRSSMB is this process's peak resident set so far, in MiB.
func PeakRSSMB() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Maxrss) / 1024
}

// Finish writes a checkpoint's last four steps, the same for every job:
// the tensors (WriteTensors, src naming each one's source), the copied
// tokenizer files (CopyAux), config.json with the keys in set replaced
// (WriteConfig), and the commit of the whole folder. It returns the
// report.
func (j *Job) Finish(tensors []safetensors.Tensor, src map[string]string, set map[string]any) (*Report, error) {
	if err := j.WriteTensors(tensors, src); err != nil {
		return nil, err
	}
	if err := j.CopyAux(); err != nil {
		return nil, err
	}
	if err := j.WriteConfig(set); err != nil {
		return nil, err
	}
	if err := j.Commit(); err != nil {
		return nil, err
	}
	return j.Report, nil
}
